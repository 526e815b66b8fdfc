#!/bin/bash
# The part of Apache's zkServer.sh that containers use, for Debian's ZooKeeper jars:
#   zkServer.sh start-foreground   exec the server's JVM (so it is the container's PID 1)
#   zkServer.sh status             print `Mode: ...` from the `srvr` four-letter word; exit 0
#                                  when the server serves (leader, follower, standalone, observer)
# JVMFLAGS and SERVER_JVMFLAGS are passed to the JVM after the default heap (ZK_SERVER_HEAP MB,
# default 1000, as Apache's zkEnv.sh), so they can override it.
set -e
config="${ZOOCFGDIR:-/conf}/zoo.cfg"
jars=/usr/share/java

case "${1:-}" in
start-foreground)
    cp=""
    for jar in zookeeper zookeeper-jute slf4j-api slf4j-simple netty-handler netty-common \
        netty-buffer netty-transport netty-codec netty-resolver netty-transport-native-epoll \
        netty-transport-native-unix-common jetty9-server jetty9-servlet jetty9-util \
        jetty9-util-ajax jetty9-http jetty9-io jetty9-security servlet-api jackson-core \
        jackson-databind jackson-annotations commons-cli metrics-core snappy-java; do
        [[ -f "$jars/$jar.jar" ]] && cp="$cp${cp:+:}$jars/$jar.jar"
    done
    # slf4j-simple logs to stderr: the container's log, as the official image's console.
    # shellcheck disable=SC2086
    exec java "-Xmx${ZK_SERVER_HEAP:-1000}m" \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        "-Dzookeeper.log.dir=${ZOO_LOG_DIR:-/logs}" \
        $SERVER_JVMFLAGS $JVMFLAGS \
        -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$config"
    ;;
status)
    port=$(sed -n 's/^clientPort=//p' "$config" 2>/dev/null | tail -1)
    if [[ -z "$port" ]]; then
        myid=$(cat "${ZOO_DATA_DIR:-/data}/myid" 2>/dev/null || echo 1)
        port=$(sed -n "s/^server\.$myid=.*;\(.*:\)\{0,1\}\([0-9]*\)$/\2/p" "$config" 2>/dev/null | tail -1)
    fi
    port=${port:-2181}
    if ! exec 3<>"/dev/tcp/127.0.0.1/$port"; then
        echo "Error contacting service. It is probably not running."
        exit 1
    fi
    printf srvr >&3
    reply=$(timeout 5 cat <&3 || true)
    exec 3<&-
    mode=$(printf '%s\n' "$reply" | sed -n 's/^Mode: //p')
    echo "Client port found: $port."
    echo "Mode: ${mode:-unknown}"
    case "$mode" in
    leader | follower | standalone | observer) exit 0 ;;
    *) exit 1 ;;
    esac
    ;;
*)
    echo "usage: zkServer.sh start-foreground|status (this image runs the server in the foreground only)" >&2
    exit 2
    ;;
esac
