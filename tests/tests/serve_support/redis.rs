//! A throwaway `redis-server` for the shared-limits tests: on a free
//! loopback port, its files in a temp dir, no persistence. It can be killed
//! and started again on the same port (the gateway must notice both).
//!
//! The binary is `$NEXUS_REDIS_SERVER`, else `redis-server` on `PATH`
//! (`.ci/run` installs the distribution's package).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    bin: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NEXUS_REDIS_SERVER") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("redis-server")).find(|p| p.is_file())
}

impl RedisServer {
    /// Starts one, or says why not (the caller skips its test); under
    /// `CI=true` a missing binary fails the test instead.
    pub fn start() -> Option<RedisServer> {
        let Some(bin) = binary() else {
            let why = "no redis-server (install the redis-server package or set NEXUS_REDIS_SERVER)";
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI: {why}; run `eval \"$(bash .ci/redis-deps.sh)\"`"
            );
            println!("skipped: {why}");
            return None;
        };
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port").port();
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the redis-server directory");
        let mut r = RedisServer { bin, port, dir, child: None };
        r.restart();
        Some(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server at once (SIGKILL: no goodbye to its clients).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it (again) on the same port and waits until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not answer on port {}", self.port);
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
