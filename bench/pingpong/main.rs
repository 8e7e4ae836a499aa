//! `pingpong [ROUND_TRIPS]`: p50 and p95 of one loopback round trip, first
//! over a std `TcpStream` (a blocking `read` waits for the echo), then over
//! a smol `TcpStream` under `smol::block_on` (the wait goes through
//! async-io's reactor: a one-shot re-arm of the socket, then polling's
//! `epoll_pwait` with its timer and notifier re-armed around it), in ten
//! alternating rounds. The echo is a thread of this process; 1,000 round
//! trips warm each side up first.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

const WARMUP: usize = 1_000;
const ROUNDS: usize = 10;

/// An echo server on a thread; returns its port.
fn echo() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.set_nodelay(true);
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// (p50, p95) in µs, nearest rank.
fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: usize| v[(v.len() * q / 100).min(v.len() - 1)];
    (at(50), at(95))
}

/// Round trips over a std socket (a blocking `read` waits for the echo).
fn std_rounds(conn: &mut TcpStream, n: usize, lat: &mut Vec<f64>) {
    let mut buf = [0u8; 64];
    for _ in 0..n {
        let t = Instant::now();
        conn.write_all(b"ping").expect("write");
        let mut got = 0;
        while got < 4 {
            got += conn.read(&mut buf).expect("read");
        }
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
}

/// Round trips over a smol socket (the wait goes through the reactor).
async fn smol_rounds(conn: &mut smol::net::TcpStream, n: usize, lat: &mut Vec<f64>) {
    use smol::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = [0u8; 64];
    for _ in 0..n {
        let t = Instant::now();
        conn.write_all(b"ping").await.expect("write");
        let mut got = 0;
        while got < 4 {
            got += conn.read(&mut buf).await.expect("read");
        }
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let port = echo();
    let mut plain = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    plain.set_nodelay(true).expect("nodelay");
    let mut reactor = smol::block_on(smol::net::TcpStream::connect(("127.0.0.1", port))).expect("connect");
    reactor.set_nodelay(true).expect("nodelay");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    std_rounds(&mut plain, WARMUP, &mut a);
    smol::block_on(smol_rounds(&mut reactor, WARMUP, &mut b));
    let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // Ten alternating rounds, so a change in the machine's speed hits both.
    for _ in 0..ROUNDS {
        std_rounds(&mut plain, n / ROUNDS, &mut a);
        smol::block_on(smol_rounds(&mut reactor, n / ROUNDS, &mut b));
    }
    let (p50, p95) = percentiles(a);
    println!("std blocking sockets   p50 {p50:6.1} µs   p95 {p95:6.1} µs");
    let (p50, p95) = percentiles(b);
    println!("smol, block_on         p50 {p50:6.1} µs   p95 {p95:6.1} µs");
}
