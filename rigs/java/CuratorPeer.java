import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListener;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

/**
 * A real Apache Curator participant for the interop tests of zookeeper-recipes.
 *
 * <p>The Rust tests (rigs/src/fixtures/curator.rs) start this as a long-lived process and drive it over
 * stdin/stdout, one line per command, so that a Rust LeaderLatch, LeaderSelector or
 * InterProcessMutex can be made to share a path with Curator's own implementation.
 *
 * <p>Usage: {@code java -cp <classes>:<curator jars> CuratorPeer <connectString> <sessionTimeoutMs>}.
 * Prints {@code ready 0x<sessionId>} once connected. Every command gets exactly one reply line,
 * {@code ok <cmd> ...} or {@code err <cmd> <message>}; things that happen on their own are printed
 * as {@code event ... ts=<millis>} lines (ts is always the last token). See the command list in
 * {@link #handle}. {@code quit} or EOF on stdin closes everything and exits 0.
 */
public final class CuratorPeer {
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    private final CuratorFramework client;
    private final Map<String, LeaderLatch> latches = new LinkedHashMap<>();
    private final Map<String, Selector> selectors = new LinkedHashMap<>();
    private final Map<String, Mutex> mutexes = new LinkedHashMap<>();

    /** A LeaderSelector whose term lasts until {@code selector_release} or an interruption. */
    private static final class Selector {
        LeaderSelector selector;
        final Semaphore release = new Semaphore(0);
        volatile boolean inTerm;
    }

    /** An InterProcessMutex with its owning thread (Curator locks are owned per thread). */
    private static final class Mutex {
        final ExecutorService worker = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "mutex-worker");
            t.setDaemon(true);
            return t;
        });
        IdMutex mutex;
        Future<?> acquiring;
        boolean held; // guarded by this, like cancelled
        boolean cancelled;
    }

    /** InterProcessMutex writing our id as node data (LeaderSelector does the same internally). */
    private static final class IdMutex extends InterProcessMutex {
        private final byte[] data;

        IdMutex(CuratorFramework client, String path, String id) {
            super(client, path);
            this.data = id == null ? null : id.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        protected byte[] getLockNodeBytes() {
            return data; // null: Curator writes the client's default data (the host IP as text)
        }

        String lockPath() {
            return getLockPath();
        }
    }

    private CuratorPeer(CuratorFramework client) {
        this.client = client;
    }

    static void println(String line) {
        synchronized (OUT) {
            OUT.print(line);
            OUT.print('\n');
            OUT.flush();
        }
    }

    static void event(String body) {
        println("event " + body + " ts=" + System.currentTimeMillis());
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: CuratorPeer <connectString> <sessionTimeoutMs>");
            System.exit(2);
        }
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(Integer.parseInt(args[1]))
                .connectionTimeoutMs(5000)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
        client.getConnectionStateListenable().addListener((c, state) -> event("conn " + state));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.err.println("CuratorPeer: not connected to " + args[0] + " within 30 s");
            System.exit(3);
        }
        CuratorPeer peer = new CuratorPeer(client);
        println("ready " + peer.sessionHex());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] t = line.split(" ", -1);
            if (t[0].equals("quit")) {
                break;
            }
            try {
                println(peer.handle(t));
            } catch (Exception e) {
                Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                println("err " + t[0] + " " + oneLine(c.getClass().getName() + ": " + c.getMessage()));
            }
        }
        peer.closeAll();
        println("ok quit");
        System.exit(0);
    }

    private String sessionHex() throws Exception {
        return "0x" + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId());
    }

    /** Runs one command and returns its reply line. */
    private String handle(String[] t) throws Exception {
        String cmd = t[0];
        switch (cmd) {
            case "session":
                return "ok session " + sessionHex();
            case "latch": { // latch <name> <path> <id>
                argc(t, 4);
                String name = t[1];
                absent(latches, name);
                LeaderLatch latch = new LeaderLatch(client, t[2], t[3], LeaderLatch.CloseMode.NOTIFY_LEADER);
                latch.addListener(new LeaderLatchListener() {
                    @Override
                    public void isLeader() {
                        event("latch " + name + " leader");
                    }

                    @Override
                    public void notLeader() {
                        event("latch " + name + " not_leader");
                    }
                });
                latches.put(name, latch);
                latch.start();
                return "ok latch " + name;
            }
            case "latch_close":
                argc(t, 2);
                present(latches, t[1]).close();
                latches.remove(t[1]);
                return "ok latch_close " + t[1];
            case "latch_has":
                argc(t, 2);
                return "ok latch_has " + t[1] + " " + present(latches, t[1]).hasLeadership();
            case "latch_path": {
                argc(t, 2);
                String p = present(latches, t[1]).getOurPath();
                return "ok latch_path " + t[1] + " " + (p == null ? "" : p);
            }
            case "participants_latch": // a fresh, unstarted latch reads the children: no node of its own
                argc(t, 2);
                return "ok participants " + json(new LeaderLatch(client, t[1]).getParticipants());
            case "participants_selector": // the same for a fresh, unstarted selector (never started, so not closed)
                argc(t, 2);
                return "ok participants " + json(new LeaderSelector(client, t[1], NOOP).getParticipants());
            case "leader_latch":
                argc(t, 2);
                return "ok leader " + new LeaderLatch(client, t[1]).getLeader().getId();
            case "leader_selector":
                argc(t, 2);
                return "ok leader " + new LeaderSelector(client, t[1], NOOP).getLeader().getId();
            case "selector": { // selector <name> <path> <id> <autoRequeue>
                argc(t, 5);
                String name = t[1];
                absent(selectors, name);
                Selector s = new Selector();
                s.selector = new LeaderSelector(client, t[2], selectorListener(name, s));
                s.selector.setId(t[3]);
                if (Boolean.parseBoolean(t[4])) {
                    s.selector.autoRequeue();
                }
                selectors.put(name, s);
                s.selector.start();
                return "ok selector " + name;
            }
            case "selector_release": {
                argc(t, 2);
                Selector s = present(selectors, t[1]);
                if (!s.inTerm) {
                    return "ok selector_release " + t[1] + " not_leader";
                }
                s.release.release();
                return "ok selector_release " + t[1];
            }
            case "selector_has":
                argc(t, 2);
                return "ok selector_has " + t[1] + " " + present(selectors, t[1]).selector.hasLeadership();
            case "selector_interrupt":
                argc(t, 2);
                present(selectors, t[1]).selector.interruptLeadership();
                return "ok selector_interrupt " + t[1];
            case "selector_requeue":
                argc(t, 2);
                return "ok selector_requeue " + t[1] + " " + present(selectors, t[1]).selector.requeue();
            case "selector_close":
                argc(t, 2);
                present(selectors, t[1]).selector.close();
                selectors.remove(t[1]);
                return "ok selector_close " + t[1];
            case "mutex_acquire": { // mutex_acquire <name> <path> <id>: acquire() on the mutex's own thread
                argc(t, 4);
                String name = t[1];
                absent(mutexes, name);
                Mutex m = new Mutex();
                m.mutex = new IdMutex(client, t[2], t[3]);
                mutexes.put(name, m);
                m.acquiring = m.worker.submit(() -> {
                    try {
                        m.mutex.acquire();
                        synchronized (m) {
                            if (m.cancelled) { // mutex_release came while acquire() was returning
                                Thread.interrupted();
                                m.mutex.release();
                                event("mutex " + name + " cancelled");
                                return;
                            }
                            m.held = true;
                        }
                        event("mutex " + name + " acquired");
                    } catch (InterruptedException e) {
                        event("mutex " + name + " cancelled");
                    } catch (Exception e) {
                        event("mutex " + name + " failed " + oneLine(e.getClass().getName() + ": " + e.getMessage()));
                    }
                });
                return "ok mutex_acquire " + name + " pending";
            }
            case "mutex_try": { // mutex_try <name> <path> <timeoutMs> [id]
                if (t.length != 4 && t.length != 5) {
                    throw new IllegalArgumentException("expected 3 or 4 arguments");
                }
                String name = t[1];
                absent(mutexes, name);
                Mutex m = new Mutex();
                m.mutex = new IdMutex(client, t[2], t.length == 5 ? t[4] : null);
                long timeout = Long.parseLong(t[3]);
                boolean got = false;
                try {
                    got = m.worker.submit(() -> m.mutex.acquire(timeout, TimeUnit.MILLISECONDS)).get();
                } finally {
                    if (got) {
                        synchronized (m) {
                            m.held = true;
                        }
                        mutexes.put(name, m);
                    } else {
                        m.worker.shutdownNow();
                    }
                }
                return "ok mutex_try " + name + " " + got;
            }
            case "mutex_path": { // Curator keeps the lock path per owning thread: ask the worker
                argc(t, 2);
                Mutex m = present(mutexes, t[1]);
                boolean held;
                synchronized (m) {
                    held = m.held;
                }
                String p = held ? m.worker.submit(m.mutex::lockPath).get() : null;
                return "ok mutex_path " + t[1] + " " + (p == null ? "" : p);
            }
            case "mutex_release": { // releases a held mutex; cancels (interrupts) a pending acquire
                argc(t, 2);
                String name = t[1];
                Mutex m = present(mutexes, name);
                mutexes.remove(name);
                synchronized (m) {
                    if (!m.held) {
                        m.cancelled = true;
                        m.acquiring.cancel(true);
                        m.worker.shutdown();
                        return "ok mutex_release " + name + " cancelled";
                    }
                }
                m.worker.submit(() -> {
                    m.mutex.release();
                    return null;
                }).get();
                m.worker.shutdown();
                event("mutex " + name + " released");
                return "ok mutex_release " + name;
            }
            default:
                return "err " + cmd + " unknown command";
        }
    }

    private static LeaderSelectorListener selectorListener(String name, Selector s) {
        return new LeaderSelectorListenerAdapter() {
            @Override
            public void takeLeadership(CuratorFramework c) throws Exception {
                s.release.drainPermits();
                s.inTerm = true;
                event("selector " + name + " term_start");
                try {
                    s.release.acquire();
                } catch (InterruptedException e) {
                    s.inTerm = false;
                    event("selector " + name + " term_end reason=interrupted");
                    throw e;
                }
                s.inTerm = false;
                event("selector " + name + " term_end reason=released");
            }

            @Override
            public void stateChanged(CuratorFramework c, ConnectionState newState) {
                event("state " + name + " " + newState);
                super.stateChanged(c, newState); // CancelLeadershipException on SUSPENDED / LOST
            }
        };
    }

    private static final LeaderSelectorListener NOOP = new LeaderSelectorListenerAdapter() {
        @Override
        public void takeLeadership(CuratorFramework c) {
        }
    };

    private void closeAll() {
        for (LeaderLatch l : latches.values()) {
            quietly(l::close);
        }
        for (Selector s : selectors.values()) {
            quietly(s.selector::close);
        }
        for (Mutex m : mutexes.values()) {
            boolean held;
            synchronized (m) {
                held = m.held;
                m.cancelled = true;
            }
            if (held) {
                quietly(() -> m.worker.submit(() -> {
                    m.mutex.release();
                    return null;
                }).get(5, TimeUnit.SECONDS));
            }
            m.worker.shutdownNow();
        }
        client.close();
    }

    private interface Action {
        void run() throws Exception;
    }

    private static void quietly(Action a) {
        try {
            a.run();
        } catch (Exception e) {
            System.err.println("CuratorPeer: while closing: " + e);
        }
    }

    private static void argc(String[] t, int n) {
        if (t.length != n) {
            throw new IllegalArgumentException("expected " + (n - 1) + " arguments, got " + (t.length - 1));
        }
    }

    private static <V> V present(Map<String, V> m, String name) {
        V v = m.get(name);
        if (v == null) {
            throw new IllegalArgumentException("no such name: " + name);
        }
        return v;
    }

    private static void absent(Map<String, ?> m, String name) {
        if (m.containsKey(name)) {
            throw new IllegalArgumentException("name already in use: " + name);
        }
    }

    private static String oneLine(String s) {
        return s.replace('\r', ' ').replace('\n', ' ');
    }

    private static String json(Collection<Participant> ps) {
        StringBuilder b = new StringBuilder("[");
        for (Participant p : ps) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"id\":\"");
            for (char ch : p.getId().toCharArray()) {
                if (ch == '"' || ch == '\\') {
                    b.append('\\').append(ch);
                } else if (ch < 0x20) {
                    b.append(String.format("\\u%04x", (int) ch));
                } else {
                    b.append(ch);
                }
            }
            b.append("\",\"leader\":").append(p.isLeader()).append('}');
        }
        return b.append(']').toString();
    }
}
