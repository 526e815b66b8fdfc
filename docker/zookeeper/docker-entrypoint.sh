#!/bin/bash
# Entrypoint of zookeeper-recipes/zookeeper:3.8, written to the contract of the official
# `zookeeper` image (so the same compose file and harness run on both):
# - as root with the default command, it hands the data directories to the user `zookeeper`
#   and runs itself again as that user;
# - it writes $ZOO_CONF_DIR/zoo.cfg from the ZOO_* variables only when there is none (a
#   restarted container keeps its configuration), and $ZOO_DATA_DIR/myid from ZOO_MY_ID
#   (default 1) only when there is none;
# - ZOO_SERVERS and ZOO_CFG_EXTRA are whitespace-separated lists of zoo.cfg lines; without
#   ZOO_SERVERS the server is a standalone `server.1=localhost:2888:3888;2181`;
# - then it execs the command, by default `zkServer.sh start-foreground`, which execs the JVM:
#   the server is the container's PID 1 and stops on SIGTERM.
set -e

if [[ "$1" = 'zkServer.sh' && "$(id -u)" = '0' ]]; then
    chown -R zookeeper:zookeeper "$ZOO_DATA_DIR" "$ZOO_DATA_LOG_DIR" "$ZOO_LOG_DIR" "$ZOO_CONF_DIR"
    exec setpriv --reuid=zookeeper --regid=zookeeper --init-groups "$0" "$@"
fi

config="$ZOO_CONF_DIR/zoo.cfg"
if [[ ! -f "$config" ]]; then
    {
        echo "dataDir=$ZOO_DATA_DIR"
        echo "dataLogDir=$ZOO_DATA_LOG_DIR"
        echo "tickTime=$ZOO_TICK_TIME"
        echo "initLimit=$ZOO_INIT_LIMIT"
        echo "syncLimit=$ZOO_SYNC_LIMIT"
        echo "autopurge.snapRetainCount=$ZOO_AUTOPURGE_SNAPRETAINCOUNT"
        echo "autopurge.purgeInterval=$ZOO_AUTOPURGE_PURGEINTERVAL"
        echo "maxClientCnxns=$ZOO_MAX_CLIENT_CNXNS"
        echo "standaloneEnabled=$ZOO_STANDALONE_ENABLED"
        echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"
        for line in ${ZOO_SERVERS:-server.1=localhost:2888:3888;2181}; do
            echo "$line"
        done
        if [[ -n "$ZOO_4LW_COMMANDS_WHITELIST" ]]; then
            echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"
        fi
        for line in $ZOO_CFG_EXTRA; do
            echo "$line"
        done
    } >"$config"
fi

if [[ ! -f "$ZOO_DATA_DIR/myid" ]]; then
    echo "${ZOO_MY_ID:-1}" >"$ZOO_DATA_DIR/myid"
fi

exec "$@"
