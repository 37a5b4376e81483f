//! Apache Kafka as a test peer: the jars `tools/kafka/fetch.sh` put under `target/kafka/<version>/`,
//! the harness (`tools/kafka/harness`), a live single-node KRaft broker, and the `seglog` binary.
//! Every child process is waited for with a deadline; a broker is killed when its guard drops.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Kafka release pinned in `tools/kafka/pom.xml`.
pub fn kafka_version() -> String {
    let pom =
        std::fs::read_to_string(repo().join("tools/kafka/pom.xml")).expect("tools/kafka/pom.xml");
    let start = pom
        .find("<kafka.version>")
        .expect("<kafka.version> in pom.xml")
        + "<kafka.version>".len();
    let end = pom[start..].find('<').expect("</kafka.version>") + start;
    pom[start..end].trim().to_string()
}

/// `target/kafka/<version>/`, holding `lib/*.jar` and `harness.jar`. Fails (never skips) when the
/// jars are missing.
pub fn home() -> PathBuf {
    let version = kafka_version();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from);
    let home = target.join("kafka").join(&version);
    let ready = home.join("harness.jar").is_file()
        && home
            .join("lib")
            .join(format!("kafka-storage-{version}.jar"))
            .is_file();
    assert!(
        ready,
        "Apache Kafka {version} jars are missing under {}: run tools/kafka/fetch.sh first",
        home.display()
    );
    home
}

fn classpath() -> String {
    let h = home();
    format!("{}/lib/*:{}", h.display(), h.join("harness.jar").display())
}

/// A `java` command with Kafka's classpath and a small heap.
pub fn java() -> Command {
    let mut c = Command::new("java");
    c.arg("-Xmx512m").arg("-XX:+UseSerialGC");
    // DumpLogSegments' text must be UTF-8 whatever the locale (a C locale would print `?`).
    c.args([
        "-Dfile.encoding=UTF-8",
        "-Dsun.stdout.encoding=UTF-8",
        "-Dsun.stderr.encoding=UTF-8",
    ]);
    c.arg("-cp").arg(classpath());
    c.stdin(Stdio::null());
    c
}

/// Waits for `child` at most `limit`; kills it (and fails) when it takes longer.
pub fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Output {
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out_t = thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut v);
        }
        v
    });
    let err_t = thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut v);
        }
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}, killed");
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// Runs a command with a deadline and returns its output (whatever its status).
pub fn run(mut cmd: Command, limit: Duration, what: &str) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    wait_bounded(child, limit, what)
}

/// Runs a command that must succeed; returns its stdout.
pub fn run_ok(cmd: Command, limit: Duration, what: &str) -> String {
    let out = run(cmd, limit, what);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The harness (`tools/kafka/harness`) with `args`.
pub fn harness(args: &[&str], limit: Duration) -> String {
    let mut c = java();
    c.arg("seglog.kafka.Harness").args(args);
    run_ok(
        c,
        limit,
        &format!("harness {}", args.first().unwrap_or(&"")),
    )
}

/// The `seglog` binary.
pub fn seglog() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_seglog"));
    c.stdin(Stdio::null());
    c
}

/// JSON lines parsed.
pub fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

/// Every regular file under `dir` (relative path → CRC-32C and length), for "changes nothing".
pub fn file_hashes(dir: &Path) -> BTreeMap<String, (u32, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).expect("read");
                let rel = p
                    .strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string();
                out.insert(rel, (crc32c::crc32c(&bytes), bytes.len() as u64));
            }
        }
    }
    out
}

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let p = e.path();
        let t = to.join(e.file_name());
        if p.is_dir() {
            copy_tree(&p, &t);
        } else {
            std::fs::copy(&p, &t).expect("copy");
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A single-node KRaft broker (combined broker + controller) from the jars, on 127.0.0.1.
/// Killed with SIGKILL when dropped if still running.
#[derive(Debug)]
pub struct Broker {
    child: Option<Child>,
    /// `127.0.0.1:<port>`.
    pub bootstrap: String,
    console: PathBuf,
}

const CLUSTER_ID: &str = "c2VnbG9nLWludGVyb3AtMQ"; // base64url("seglog-interop-1")

impl Broker {
    /// Writes a config for `log_dir` (new ports each time) and, when `format`, formats the
    /// storage as `kafka-storage format` does; then starts the broker and waits (bounded) until a
    /// client can reach it.
    pub fn start(work: &Path, log_dir: &Path, format: bool) -> Broker {
        Broker::start_with(work, log_dir, format, "")
    }

    /// [`Broker::start`] with `extra` lines of broker configuration (`key=value\n`...).
    pub fn start_with(work: &Path, log_dir: &Path, format: bool, extra: &str) -> Broker {
        let (port, cport) = (free_port(), free_port());
        std::fs::create_dir_all(work).expect("mkdir work");
        let config = work.join(format!("server-{port}.properties"));
        let text = format!(
            "process.roles=broker,controller\nnode.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{cport}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={}\nnum.partitions=1\noffsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=1\ntransaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\ntransaction.state.log.num.partitions=1\n\
             group.initial.rebalance.delay.ms=0\nmessage.max.bytes=4194304\n\
             replica.fetch.max.bytes=4194304\nnum.recovery.threads.per.data.dir=1\n\
             log.flush.offset.checkpoint.interval.ms=600000\n\
             log.flush.start.offset.checkpoint.interval.ms=600000\n\
             log.flush.scheduler.interval.ms=600000\n{extra}",
            log_dir.display()
        );
        std::fs::write(&config, text).expect("write config");
        if format {
            let mut c = java();
            c.args(["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c"])
                .arg(&config);
            run_ok(c, Duration::from_secs(60), "kafka-storage format");
        }
        let console = work.join(format!("broker-{port}.out"));
        let out = std::fs::File::create(&console).expect("console file");
        let err = out.try_clone().expect("clone");
        let child = java()
            .arg("-XX:TieredStopAtLevel=1")
            .arg("kafka.Kafka")
            .arg(&config)
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start broker");
        let mut b = Broker {
            child: Some(child),
            bootstrap: format!("127.0.0.1:{port}"),
            console,
        };
        b.wait_ready();
        b
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(s) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "broker exited during startup ({s}):\n{}",
                    self.console_text()
                );
            }
            if std::net::TcpStream::connect(&self.bootstrap).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "broker not listening after 90 s:\n{}",
                self.console_text()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The broker's console output (stdout and stderr).
    pub fn console_text(&self) -> String {
        std::fs::read_to_string(&self.console).unwrap_or_default()
    }

    /// Runs a harness client subcommand against this broker.
    pub fn client(&self, sub: &str, args: &[&str]) -> String {
        let mut all = vec![sub, self.bootstrap.as_str()];
        all.extend_from_slice(args);
        harness(&all, Duration::from_secs(180))
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Clean shutdown (SIGTERM), bounded; fails if the broker does not exit in 90 s.
    pub fn stop(mut self) -> ExitStatus {
        let pid = self.pid().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("broker did not stop within 90 s:\n{}", self.console_text());
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, as a power cut of the process (the page cache survives).
    pub fn kill9(mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A small deterministic generator (splitmix64) for seeded damage.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// Next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
