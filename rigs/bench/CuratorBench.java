import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;

/**
 * The Curator side of {@code rigs/examples/bench.rs}: the same workloads, arguments, semantics and
 * output lines, on Apache Curator 5.4, so that the two compare figure by figure.
 * {@code rigs/bench/compare.sh} compiles and runs it against the Debian jars listed in
 * {@code rigs/java/curator-jars.txt}.
 *
 * <pre>
 * java -cp &lt;classes&gt;:&lt;jars&gt; CuratorBench [--connect HOSTS] &lt;workload&gt; &lt;args&gt;
 *   handover N R | join N | lock C S | many N | idle N [T] | fleet N [T]
 * </pre>
 *
 * <p>HOSTS defaults to {@code $ZK_CONNECT}; there is no embedded server here (start one with
 * {@code bench server}). Figures go to stdout as {@code name value unit}, one per line, and
 * nothing else does; bad arguments exit with status 2.
 *
 * <p>Where the Rust bench has one {@code Session} per candidate or client, this has one
 * {@code CuratorFramework} (one ZooKeeper session) per candidate or client; {@code many} and
 * {@code idle} run on one framework. The workloads, the warm-up, the session timeout (60 s; for
 * {@code idle} T seconds, default 10) and the request counting
 * (zk_packets_received of {@code mntr}, less what one read adds, calibrated with back-to-back
 * reads, less the background of an adjacent control window, read 10 ms after the window's end)
 * are exactly those of the module docs of {@code rigs/examples/bench.rs}; the constants below have
 * the same names and values. Where Rust waits on an event, this waits for the same condition:
 * {@code LeaderLatch.await()} for leadership, and {@code getOurPath()} turning non-null (polled
 * every 50 microseconds, since Curator has no event for it) for a node that exists.
 *
 * <p>One difference in what the server sees: ZooKeeper's Java client pings when it has sent
 * nothing for 10 s, and checks that whenever its connection thread wakes, for instance for a
 * watch event. A successor that waited in line for more than 10 s therefore sends a ping together
 * with its getChildren, and the handover counts three packets instead of two (in this bench: with
 * 200 candidates or more, once the first rounds are over). That ping is part of what a Curator
 * handover costs the server, so it is counted.
 *
 * <p>Those pings are all that {@code idle} sees: a leading Curator latch sends nothing, and the
 * client pings once it has sent nothing for about a third of the negotiated timeout, whatever the
 * number of latches. (The Rust session sends a {@code sync} every eighth of it instead.)
 */
public final class CuratorBench {
    private static final String USAGE = String.join("\n",
            "usage: CuratorBench [--connect HOSTS] <workload> <args>",
            "",
            "  handover N R   N LeaderLatch candidates (N >= 2), each on its own client; R measured handovers",
            "  join N         N connected clients start one LeaderLatch each on one empty path at once",
            "  lock C S       C clients acquire+release one InterProcessMutex for S seconds",
            "  many N         N LeaderLatches on one client, on N paths",
            "  idle N [T]     N leading LeaderLatches on one client (timeout T s, default 10): packets/s",
            "  fleet N [T]    N clients (timeout T s, default 10), one LeaderLatch each in one election, on the",
            "                 followers of the three-server ensemble HOSTS (`bench cluster` starts one)",
            "",
            "HOSTS defaults to $ZK_CONNECT (start a server with `cargo run --release --example bench -- server`).",
            "Figures go to stdout as `name value unit`, one per line; everything else goes to stderr.");

    private static final int SESSION_TIMEOUT_MS = 60_000;
    private static final int CONNECTION_TIMEOUT_MS = 15_000;
    private static final int WARMUP_ROUNDS = 10;
    private static final long LOCK_WARMUP_MS = 1_000;
    private static final long SETTLE_MS = 10;
    private static final long HANDOVER_CONTROL_MS = 50;
    private static final long JOIN_CONTROL_MS = 1_000;
    private static final int JOIN_REPEATS = 5;
    private static final int CALIBRATION_READS = 21;
    private static final long WAIT_S = 120;
    private static final long POLL_NS = 50_000;
    private static final int CONNECTS_IN_FLIGHT = 32;
    private static final int IDLE_TIMEOUT_S = 10;
    private static final long IDLE_SETTLE_MS = 2_000;
    private static final long IDLE_WINDOW_MS = 10_000;
    private static final String ROOT = "/zkr-bench";

    /** A bad command line: usage and exit status 2. */
    private static final class UsageError extends Exception {
        private static final long serialVersionUID = 1L;

        UsageError(String message) {
            super(message);
        }
    }

    public static void main(String[] args) {
        if (args.length > 0 && (args[0].equals("-h") || args[0].equals("--help"))) {
            System.err.println(USAGE);
            return;
        }
        try {
            run(args);
        } catch (UsageError e) {
            System.err.println("CuratorBench: " + e.getMessage() + "\n\n" + USAGE);
            System.exit(2);
        } catch (Exception e) {
            System.err.println("CuratorBench: " + e);
            e.printStackTrace();
            System.exit(1);
        }
        System.out.flush();
        System.exit(0); // Curator's threads are not daemons
    }

    private static void run(String[] args) throws Exception {
        int at = 0;
        String connect = null;
        if (args.length > 0 && args[0].equals("--connect")) {
            if (args.length < 2 || args[1].isEmpty() || args[1].startsWith("-")) {
                throw new UsageError("--connect needs HOSTS");
            }
            connect = args[1];
            at = 2;
        }
        if (at >= args.length) {
            throw new UsageError("no workload given");
        }
        String name = args[at];
        String[] p = Arrays.copyOfRange(args, at + 1, args.length);
        switch (name) {
            case "handover":
                expect(name, p, 2, "N R");
                int n = number(p[0], "N (candidates)", 2);
                int rounds = number(p[1], "R (rounds)", 1);
                handover(connect(connect), n, rounds);
                break;
            case "join":
                expect(name, p, 1, "N");
                join(connect(connect), number(p[0], "N (candidates)", 1));
                break;
            case "lock":
                expect(name, p, 2, "C S");
                int clients = number(p[0], "C (clients)", 1);
                int seconds = number(p[1], "S (seconds)", 1);
                lock(connect(connect), clients, seconds);
                break;
            case "many":
                expect(name, p, 1, "N");
                many(connect(connect), number(p[0], "N (latches)", 1));
                break;
            case "idle": {
                int latches = number(nAndT(name, p)[0], "N (latches)", 1);
                int timeoutS = timeout(p, IDLE_TIMEOUT_S);
                idle(connect(connect), latches, timeoutS);
                break;
            }
            case "fleet": {
                int sessions = number(nAndT(name, p)[0], "N (sessions)", 2);
                int timeoutS = timeout(p, FLEET_TIMEOUT_S);
                fleet(connect(connect), sessions, timeoutS);
                break;
            }
            case "server":
            case "cluster":
                throw new UsageError("no embedded server on the Curator side: use `bench " + name + "`");
            default:
                throw new UsageError("unknown workload \"" + name + "\"");
        }
    }

    /** The arguments `N [T]`, checked for their count. */
    private static String[] nAndT(String name, String[] p) throws UsageError {
        if (p.length < 1 || p.length > 2) {
            throw new UsageError("`" + name + "` takes N [T], got " + Arrays.toString(p));
        }
        return p;
    }

    /** T of `N [T]` in seconds, else the default. */
    private static int timeout(String[] p, int defaultS) throws UsageError {
        return p.length == 2 ? number(p[1], "T (session timeout, seconds)", 1) : defaultS;
    }

    private static void expect(String name, String[] p, int n, String shape) throws UsageError {
        if (p.length != n) {
            throw new UsageError("`" + name + "` takes " + shape + ", got " + Arrays.toString(p));
        }
    }

    private static int number(String text, String what, int min) throws UsageError {
        try {
            int v = Integer.parseInt(text);
            if (v >= min) {
                return v;
            }
        } catch (NumberFormatException e) {
            // below
        }
        throw new UsageError(what + " must be a whole number >= " + min + ", got \"" + text + "\"");
    }

    private static String connect(String given) throws UsageError {
        if (given != null) {
            return given;
        }
        String env = System.getenv("ZK_CONNECT");
        if (env == null || env.isEmpty()) {
            throw new UsageError("give --connect HOSTS or set ZK_CONNECT");
        }
        return env;
    }

    // ---- measuring ---------------------------------------------------------------------------

    private static void figure(String name, String value, String unit) {
        System.out.println(name + " " + value + " " + unit);
    }

    private static String fixed(double v, int decimals) {
        return String.format(Locale.ROOT, "%." + decimals + "f", v);
    }

    /** Nearest-rank percentile, as in bench.rs. */
    private static double percentile(double[] values, double q) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int rank = (int) Math.ceil(q * sorted.length);
        return sorted[Math.max(1, Math.min(rank, sorted.length)) - 1];
    }

    private static double mean(double[] values) {
        return Arrays.stream(values).average().orElse(0);
    }

    /** One zk_packets_received reading and when its answer came. */
    private static final class Reading {
        final long packets;
        final long at;

        Reading(long packets, long at) {
            this.packets = packets;
            this.at = at;
        }
    }

    /** The first host:port of a connect string. */
    static InetSocketAddress firstHost(String connect) {
        String hosts = connect.split("/", 2)[0];
        String first = hosts.split(",", 2)[0].trim();
        int colon = first.lastIndexOf(':');
        String host = colon < 0 ? first : first.substring(0, colon);
        int port = colon < 0 ? 2181 : Integer.parseInt(first.substring(colon + 1));
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        return new InetSocketAddress(host, port);
    }

    /** Server-side request counting with mntr, as in bench.rs. */
    private static final class Packets {
        final InetSocketAddress address;
        double perRead;

        Packets(InetSocketAddress address) {
            this.address = address;
        }

        static Packets calibrate(String connect) throws IOException {
            Packets packets = new Packets(firstHost(connect));
            Reading[] r = new Reading[CALIBRATION_READS];
            for (int i = 0; i < r.length; i++) {
                r[i] = packets.read();
            }
            double[] deltas = new double[r.length - 1];
            for (int i = 1; i < r.length; i++) {
                deltas[i - 1] = r[i].packets - r[i - 1].packets;
            }
            packets.perRead = percentile(deltas, 0.5);
            System.err.println("CuratorBench: one mntr read adds " + packets.perRead
                    + " packets (median of " + deltas.length + " back-to-back reads of " + packets.address + ")");
            return packets;
        }

        Reading read() throws IOException {
            try (Socket s = new Socket()) {
                s.connect(address, 5_000);
                s.setSoTimeout(5_000);
                OutputStream out = s.getOutputStream();
                out.write("mntr".getBytes(StandardCharsets.US_ASCII));
                out.flush();
                InputStream in = s.getInputStream();
                String text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                long now = System.nanoTime();
                for (String line : text.split("\n")) {
                    String[] kv = line.split("\t", 2);
                    if (kv.length == 2 && kv[0].trim().equals("zk_packets_received")) {
                        return new Reading(Long.parseLong(kv[1].trim()), now);
                    }
                }
                throw new IOException("mntr of " + address + " has no zk_packets_received");
            }
        }

        /** Opens a window after an idle control window of controlMs. */
        Reading[] open(long controlMs) throws IOException, InterruptedException {
            Reading from = read();
            Thread.sleep(controlMs);
            return new Reading[] {from, read()};
        }

        /** Closes a window SETTLE_MS after its end: {requests, background taken out}. */
        double[] close(Reading[] control) throws IOException, InterruptedException {
            Thread.sleep(SETTLE_MS);
            Reading end = read();
            Reading from = control[0];
            Reading start = control[1];
            double idle = (start.packets - from.packets) - perRead;
            double idleNs = start.at - from.at;
            double windowNs = end.at - start.at;
            double background = idleNs > 0 ? Math.max(idle, 0) * windowNs / idleNs : 0;
            double counted = (end.packets - start.packets) - perRead;
            return new double[] {counted - background, background};
        }
    }

    /** Polls cond every 50 microseconds until it holds; returns System.nanoTime() then. */
    private static long waitUntil(String what, BooleanSupplier cond) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(what + " (waited " + WAIT_S + " s)");
            }
            LockSupport.parkNanos(POLL_NS);
        }
        return System.nanoTime();
    }

    // ---- clients and paths -------------------------------------------------------------------

    private static CuratorFramework newClient(String connect) {
        return newClient(connect, SESSION_TIMEOUT_MS);
    }

    private static CuratorFramework newClient(String connect, int sessionTimeoutMs) {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionTimeoutMs)
                .connectionTimeoutMs(CONNECTION_TIMEOUT_MS)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
        client.start();
        return client;
    }

    private static void connected(CuratorFramework client) throws InterruptedException {
        if (!client.blockUntilConnected((int) WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("a client did not connect (waited " + WAIT_S + " s)");
        }
    }

    /** n connected clients, CONNECTS_IN_FLIGHT connecting at a time. */
    private static List<CuratorFramework> connectClients(String connect, int n) throws Exception {
        long t0 = System.nanoTime();
        List<CuratorFramework> clients = new ArrayList<>(n);
        for (int from = 0; from < n; from += CONNECTS_IN_FLIGHT) {
            List<CuratorFramework> batch = new ArrayList<>();
            for (int i = from; i < Math.min(n, from + CONNECTS_IN_FLIGHT); i++) {
                batch.add(newClient(connect));
            }
            for (CuratorFramework c : batch) {
                connected(c);
            }
            clients.addAll(batch);
        }
        int negotiated = clients.get(0).getZookeeperClient().getZooKeeper().getSessionTimeout();
        System.err.println("CuratorBench: " + n + " clients connected in "
                + fixed((System.nanoTime() - t0) / 1e6, 1) + " ms (session timeout " + negotiated + " ms)");
        return clients;
    }

    private static void closeAll(List<CuratorFramework> clients) {
        clients.parallelStream().forEach(CuratorFramework::close);
    }

    private static String freshPath(String what) {
        return ROOT + "/" + what + "-curator-" + UUID.randomUUID().toString().replace("-", "").substring(0, 8);
    }

    /**
     * Creates ROOT and, as a container (as the recipes create their paths; the server removes it
     * once its last child has gone), path, outside any measured window.
     */
    private static void ensurePath(CuratorFramework client, String path) throws Exception {
        for (String p : new String[] {ROOT, path}) {
            try {
                client.create().withMode(p.equals(ROOT) ? CreateMode.PERSISTENT : CreateMode.CONTAINER).forPath(p, new byte[0]);
            } catch (KeeperException.NodeExistsException e) {
                // fine
            }
        }
    }

    private static long rssKb() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.substring(6).trim().replace("kB", "").trim());
            }
        }
        throw new IOException("no VmRSS in /proc/self/status");
    }

    // ---- workloads ---------------------------------------------------------------------------

    /** A handover candidate: its client and its current latch. */
    private static final class Candidate {
        final CuratorFramework client;
        final LeaderLatch latch;
        final String id;

        Candidate(CuratorFramework client, LeaderLatch latch, String id) {
            this.client = client;
            this.latch = latch;
            this.id = id;
        }
    }

    private static LeaderLatch startLatch(CuratorFramework client, String path, String id) throws Exception {
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.start();
        waitUntil("latch " + id + " did not create its node on " + path, () -> latch.getOurPath() != null);
        return latch;
    }

    private static void handover(String connect, int n, int rounds) throws Exception {
        Packets packets = Packets.calibrate(connect);
        List<CuratorFramework> clients = connectClients(connect, n);
        String path = freshPath("handover");
        ArrayDeque<Candidate> queue = new ArrayDeque<>();
        for (int i = 0; i < n; i++) {
            String id = "curator-" + i;
            queue.add(new Candidate(clients.get(i), startLatch(clients.get(i), path, id), id));
        }
        Candidate first = queue.peek();
        if (!first.latch.await(WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("the first candidate " + first.id + " did not become leader");
        }
        System.err.println("CuratorBench: " + n + " candidates joined " + path);
        Thread.sleep(SETTLE_MS);

        ExecutorService waiter = Executors.newSingleThreadExecutor();
        double[] millis = new double[rounds];
        double[] requests = new double[rounds];
        double[] backgrounds = new double[rounds];
        for (int round = 0; round < WARMUP_ROUNDS + rounds; round++) {
            Candidate leader = queue.poll();
            Candidate successor = queue.peek();
            Reading[] control = packets.open(HANDOVER_CONTROL_MS);
            CountDownLatch ready = new CountDownLatch(1);
            Future<Long> known = waiter.submit(() -> {
                ready.countDown();
                if (!successor.latch.await(WAIT_S, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("successor " + successor.id + " did not learn that it leads");
                }
                return System.nanoTime();
            });
            ready.await();
            long t0 = System.nanoTime();
            leader.latch.close();
            long knownAt;
            try {
                knownAt = known.get(WAIT_S + 1, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                throw new IllegalStateException("round " + round + ": successor " + successor.id
                        + " did not learn that it leads (waited " + WAIT_S + " s)");
            }
            double[] counted = packets.close(control);
            if (round >= WARMUP_ROUNDS) {
                int i = round - WARMUP_ROUNDS;
                millis[i] = (knownAt - t0) / 1e6;
                requests[i] = counted[0];
                backgrounds[i] = counted[1];
            }
            // Back in line behind everyone, on the same client: N stays constant.
            queue.add(new Candidate(leader.client, startLatch(leader.client, path, leader.id), leader.id));
            Thread.sleep(SETTLE_MS);
        }
        waiter.shutdown();

        double[] whole = Arrays.stream(requests).map(Math::rint).toArray();
        TreeMap<Long, Integer> histogram = new TreeMap<>();
        for (double w : whole) {
            histogram.merge((long) w, 1, Integer::sum);
        }
        System.err.println("CuratorBench: handover N=" + n + " R=" + rounds + ": ms p90 "
                + fixed(percentile(millis, 0.9), 3) + ", max " + fixed(percentile(millis, 1.0), 3)
                + "; requests per handover mean "
                + fixed(mean(requests), 2) + ", rounds per count " + histogram
                + "; background taken out per window mean " + fixed(mean(backgrounds), 2));
        figure("handover_ms_p50", fixed(percentile(millis, 0.5), 3), "ms");
        figure("handover_ms_p99", fixed(percentile(millis, 0.99), 3), "ms");
        figure("requests_per_handover_p50", Long.toString((long) percentile(whole, 0.5)), "requests");

        for (Candidate c : queue) {
            c.latch.close();
        }
        closeAll(clients);
    }

    private static void join(String connect, int n) throws Exception {
        Packets packets = Packets.calibrate(connect);
        List<CuratorFramework> clients = connectClients(connect, n);
        double[] millis = new double[JOIN_REPEATS];
        double[] requests = new double[JOIN_REPEATS];
        for (int repeat = 0; repeat < JOIN_REPEATS; repeat++) {
            double[] r = joinOnce(packets, clients);
            System.err.println("CuratorBench: join N=" + n + " #" + (repeat + 1) + ": " + fixed(r[0], 3) + " ms, "
                    + fixed(r[1], 1) + " requests (" + fixed(r[2], 1) + " background taken out)");
            millis[repeat] = r[0];
            requests[repeat] = Math.rint(r[1]);
        }
        figure("join_all_ms", fixed(percentile(millis, 0.5), 3), "ms");
        figure("join_requests", Long.toString((long) percentile(requests, 0.5)), "requests");
        closeAll(clients);
    }

    /**
     * One join of every client on a fresh, empty path: {ms, requests, background taken out}. The
     * latches are closed and their nodes gone before it returns.
     */
    private static double[] joinOnce(Packets packets, List<CuratorFramework> clients) throws Exception {
        int n = clients.size();
        String path = freshPath("join");
        ensurePath(clients.get(0), path);
        Thread.sleep(SETTLE_MS);

        Reading[] control = packets.open(JOIN_CONTROL_MS);
        long t0 = System.nanoTime();
        List<LeaderLatch> latches = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            LeaderLatch latch = new LeaderLatch(clients.get(i), path, "curator-" + i);
            latch.start();
            latches.add(latch);
        }
        long done = waitUntil(n + " latches did not all join " + path + " with one leader", () -> {
            boolean led = false;
            for (LeaderLatch l : latches) {
                if (l.getOurPath() == null) {
                    return false;
                }
                led |= l.hasLeadership();
            }
            return led;
        });
        double[] counted = packets.close(control);

        // Curator deletes a closed latch's node in the background: wait until all are gone, so
        // that the next join starts from a quiet server.
        for (LeaderLatch l : latches) {
            l.close();
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (hasChildren(clients.get(0), path)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the closed latches' nodes did not go from " + path
                        + " (waited " + WAIT_S + " s)");
            }
            Thread.sleep(SETTLE_MS);
        }
        return new double[] {(done - t0) / 1e6, counted[0], counted[1]};
    }

    /** Whether path has children; false once the server has removed the (container) path. */
    private static boolean hasChildren(CuratorFramework client, String path) throws Exception {
        try {
            return !client.getChildren().forPath(path).isEmpty();
        } catch (KeeperException.NoNodeException e) {
            return false;
        }
    }

    private static void lock(String connect, int c, int seconds) throws Exception {
        List<CuratorFramework> clients = connectClients(connect, c);
        String path = freshPath("lock");
        long measuredFrom = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(LOCK_WARMUP_MS);
        long until = measuredFrom + TimeUnit.SECONDS.toNanos(seconds);
        ExecutorService pool = Executors.newFixedThreadPool(c);
        List<Future<long[]>> tasks = new ArrayList<>();
        for (int i = 0; i < c; i++) {
            CuratorFramework client = clients.get(i);
            int index = i;
            tasks.add(pool.submit(() -> {
                InterProcessMutex mutex = new InterProcessMutex(client, path);
                long measured = 0;
                long longest = 0;
                while (true) {
                    long started = System.nanoTime();
                    if (!mutex.acquire(WAIT_S, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("client " + index + " did not acquire the mutex (waited "
                                + WAIT_S + " s)");
                    }
                    mutex.release();
                    long now = System.nanoTime();
                    if (now >= until) {
                        return new long[] {measured, longest};
                    }
                    if (now >= measuredFrom) {
                        measured++;
                        longest = Math.max(longest, now - started);
                    }
                }
            }));
        }
        long total = 0;
        List<String> perClient = new ArrayList<>();
        for (Future<long[]> t : tasks) {
            long[] r = t.get();
            total += r[0];
            perClient.add(r[0] + " (longest " + fixed(r[1] / 1e6, 1) + " ms)");
        }
        pool.shutdown();
        System.err.println("CuratorBench: lock C=" + c + " S=" + seconds + ": " + total
                + " cycles in the measured " + seconds + " s; per client: " + String.join(", ", perClient));
        figure("lock_ops_per_s", fixed((double) total / seconds, 1), "ops/s");
        closeAll(clients);
    }

    /**
     * Starts n latches on client, one on each of the fresh paths parent/e0 .. parent/e(n-1)
     * (parent exists), all at once, and returns them once every one has its node.
     */
    private static List<LeaderLatch> startLatches(CuratorFramework client, String parent, int n) throws Exception {
        List<LeaderLatch> latches = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            // start() only queues the create in the background: the n creates are in flight together.
            LeaderLatch latch = new LeaderLatch(client, parent + "/e" + i, "curator-" + i);
            latch.start();
            latches.add(latch);
        }
        waitUntil(n + " latches on one client did not all join under " + parent, () -> {
            for (LeaderLatch l : latches) {
                if (l.getOurPath() == null) {
                    return false;
                }
            }
            return true;
        });
        return latches;
    }

    private static void many(String connect, int n) throws Exception {
        CuratorFramework client = newClient(connect);
        connected(client);
        String parent = freshPath("many");
        ensurePath(client, parent);
        long rssBefore = rssKb();
        long t0 = System.nanoTime();
        List<LeaderLatch> latches = startLatches(client, parent, n);
        long done = System.nanoTime();
        long rssAfter = rssKb();
        System.err.println("CuratorBench: many N=" + n + ": RSS " + rssBefore + " kB before, " + rssAfter + " kB after");
        figure("many_start_ms", fixed((done - t0) / 1e6, 3), "ms");
        figure("rss_kb_per_latch", fixed((rssAfter - rssBefore) / (double) n, 2), "kb");

        for (LeaderLatch l : latches) {
            l.close();
        }
        client.close();
    }

    private static void idle(String connect, int n, int timeoutS) throws Exception {
        Packets packets = Packets.calibrate(connect);
        int timeoutMs = Math.multiplyExact(timeoutS, 1000);
        CuratorFramework client = newClient(connect, timeoutMs);
        connected(client);
        String parent = freshPath("idle");
        ensurePath(client, parent);
        long t0 = System.nanoTime();
        List<LeaderLatch> latches = startLatches(client, parent, n);
        long led = waitUntil(n + " latches on one client did not all lead under " + parent, () -> {
            for (LeaderLatch l : latches) {
                if (!l.hasLeadership()) {
                    return false;
                }
            }
            return true;
        });
        int negotiated = client.getZookeeperClient().getZooKeeper().getSessionTimeout();
        System.err.println("CuratorBench: idle N=" + n + ": all lead after " + fixed((led - t0) / 1e6, 1)
                + " ms (session timeout " + timeoutMs + " ms asked, " + negotiated + " ms negotiated)");

        Thread.sleep(IDLE_SETTLE_MS);
        Reading start = packets.read();
        Thread.sleep(IDLE_WINDOW_MS);
        Reading end = packets.read();
        long leading = latches.stream().filter(LeaderLatch::hasLeadership).count();
        if (leading != n) {
            throw new IllegalStateException("only " + leading + " of " + n + " latches still lead after the window");
        }
        double secs = (end.at - start.at) / 1e9;
        double received = Math.max((end.packets - start.packets) - packets.perRead, 0);
        System.err.println("CuratorBench: idle N=" + n + ": " + (end.packets - start.packets) + " packets in "
                + fixed(secs, 3) + " s, less " + packets.perRead + " for the closing read");
        figure("idle_packets_per_s", fixed(secs > 0 ? received / secs : Double.NaN, 2), "packets/s");

        for (LeaderLatch l : latches) {
            l.close();
        }
        client.close();
    }

    // ---- fleet -------------------------------------------------------------------------------

    /** The session timeout of `fleet` when none is given: zkr's default. */
    private static final int FLEET_TIMEOUT_S = 10;
    /** How long after the fleet has settled the window opens. */
    private static final long FLEET_SETTLE_MS = 5_000;

    /** The counters of one server's mntr. */
    private static java.util.Map<String, String> mntr(String hostPort) throws IOException {
        int colon = hostPort.lastIndexOf(':');
        InetSocketAddress address = new InetSocketAddress(hostPort.substring(0, colon),
                Integer.parseInt(hostPort.substring(colon + 1)));
        try (Socket s = new Socket()) {
            s.connect(address, 5_000);
            s.setSoTimeout(5_000);
            OutputStream out = s.getOutputStream();
            out.write("mntr".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            String text = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            java.util.Map<String, String> values = new TreeMap<>();
            for (String line : text.split("\n")) {
                String[] kv = line.split("\t", 2);
                if (kv.length == 2) {
                    values.put(kv[0].trim(), kv[1].trim());
                }
            }
            return values;
        }
    }

    private static double counter(String host, String key) throws IOException {
        String value = mntr(host).get(key);
        if (value == null) {
            throw new IOException("mntr of " + host + " has no " + key);
        }
        return Double.parseDouble(value);
    }

    /** As bench.rs's `fleet`: N clients on the followers, one LeaderLatch each in one election. */
    private static void fleet(String connect, int n, int timeoutS) throws Exception {
        String leader = null;
        List<String> followers = new ArrayList<>();
        for (String host : connect.split("/", 2)[0].split(",")) {
            String h = host.trim();
            String state = mntr(h).get("zk_server_state");
            if ("leader".equals(state)) {
                leader = h;
            } else if ("follower".equals(state)) {
                followers.add(h);
            } else {
                throw new IllegalStateException(h + " is neither leader nor follower: " + state);
            }
        }
        if (leader == null || followers.isEmpty()) {
            throw new IllegalStateException("fleet needs a three-server ensemble (HOSTS naming every server)");
        }
        System.err.println("CuratorBench: fleet N=" + n + ": quorum leader " + leader + ", followers " + followers);
        String toFollowers = String.join(",", followers);
        int timeoutMs = Math.multiplyExact(timeoutS, 1000);
        long rssBefore = rssKb();
        long t0 = System.nanoTime();
        List<CuratorFramework> clients = new ArrayList<>(n);
        for (int from = 0; from < n; from += CONNECTS_IN_FLIGHT) {
            List<CuratorFramework> batch = new ArrayList<>();
            for (int i = from; i < Math.min(n, from + CONNECTS_IN_FLIGHT); i++) {
                batch.add(newClient(toFollowers, timeoutMs));
            }
            for (CuratorFramework c : batch) {
                connected(c);
            }
            clients.addAll(batch);
        }
        System.err.println("CuratorBench: fleet N=" + n + ": connected in " + fixed((System.nanoTime() - t0) / 1e6, 1)
                + " ms (session timeout " + clients.get(0).getZookeeperClient().getZooKeeper().getSessionTimeout()
                + " ms negotiated)");
        String path = freshPath("fleet");
        ensurePath(clients.get(0), path);
        List<LeaderLatch> latches = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            LeaderLatch l = new LeaderLatch(clients.get(i), path, "f" + i);
            l.start();
            latches.add(l);
        }
        waitUntil("the " + n + " latches of " + path + " did not all create their nodes", () -> {
            for (LeaderLatch l : latches) {
                if (l.getOurPath() == null) {
                    return false;
                }
            }
            return true;
        });
        waitUntil("no latch of " + path + " leads",
                () -> latches.stream().anyMatch(LeaderLatch::hasLeadership));
        long rssAfter = rssKb();
        System.err.println("CuratorBench: fleet N=" + n + ": settled " + fixed((System.nanoTime() - t0) / 1e6, 1)
                + " ms after the first connect");

        Thread.sleep(FLEET_SETTLE_MS);
        double r0 = counter(leader, "zk_prep_processor_request_queued");
        double p0 = 0;
        for (String f : followers) {
            p0 += counter(f, "zk_packets_received");
        }
        long start = System.nanoTime();
        Thread.sleep(Math.max(2L * timeoutMs, 20_000L));
        double r1 = counter(leader, "zk_prep_processor_request_queued");
        double p1 = 0;
        for (String f : followers) {
            p1 += counter(f, "zk_packets_received");
        }
        double secs = (System.nanoTime() - start) / 1e9;
        long leading = latches.stream().filter(LeaderLatch::hasLeadership).count();
        if (leading != 1) {
            throw new IllegalStateException(leading + " latches lead after the window, not one");
        }
        double followerPackets = Math.max(p1 - p0 - followers.size(), 0);
        double leaderRequests = Math.max(r1 - r0, 0);
        System.err.println("CuratorBench: fleet N=" + n + ": window " + fixed(secs, 1) + " s, " + leaderRequests
                + " requests prepared at the leader, " + followerPackets + " packets at the followers");
        figure("leader_requests_per_s", fixed(leaderRequests / secs, 2), "requests/s");
        figure("leader_requests_per_s_per_session", fixed(leaderRequests / secs / n, 4), "requests/s");
        figure("follower_packets_per_s", fixed(followerPackets / secs, 2), "packets/s");
        figure("rss_kb_per_session", fixed(Math.max(rssAfter - rssBefore, 0) / (double) n, 1), "KiB");

        for (LeaderLatch l : latches) {
            l.close();
        }
        closeAll(clients);
    }
}
