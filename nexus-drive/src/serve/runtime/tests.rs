use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use futures_lite::{AsyncReadExt, AsyncWriteExt, FutureExt};

use super::*;

fn one_loop() -> (Runtime, Handle) {
    let rt = Runtime::start(1, "nexus-test-loop").expect("loop");
    let h = rt.handles()[0].clone();
    (rt, h)
}

#[test]
fn tasks_spawned_from_outside_run_on_the_loop_thread() {
    let (_rt, h) = one_loop();
    let name = block_on(h.spawn(async { std::thread::current().name().map(str::to_string) }));
    assert_eq!(name.as_deref(), Some("nexus-test-loop-0"));
    // A task spawned from a task runs on the same loop.
    let inner = block_on(h.spawn(async { spawn(async { std::thread::current().name().map(str::to_string) }).await }));
    assert_eq!(inner.as_deref(), Some("nexus-test-loop-0"));
}

#[test]
fn timers_fire_in_deadline_order_and_not_before() {
    let (_rt, h) = one_loop();
    let order = block_on(h.spawn(async {
        let start = Instant::now();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for ms in [30u64, 10, 20] {
            let seen = seen.clone();
            tasks.push(spawn(async move {
                sleep(Duration::from_millis(ms)).await;
                assert!(start.elapsed() >= Duration::from_millis(ms));
                seen.lock().unwrap().push(ms);
            }));
        }
        for t in tasks {
            t.await;
        }
        let v = seen.lock().unwrap().clone();
        v
    }));
    assert_eq!(order, vec![10, 20, 30]);
}

#[test]
fn a_reset_sleep_waits_for_its_new_deadline_and_a_dropped_one_never_fires() {
    let (_rt, h) = one_loop();
    let waited = block_on(h.spawn(async {
        let start = Instant::now();
        // Dropped before its deadline: the loop must not keep waking for it.
        let early = sleep(Duration::from_millis(5));
        drop(early);
        let mut s = sleep(Duration::from_millis(5));
        s.reset(Instant::now() + Duration::from_millis(40));
        (&mut s).await;
        start.elapsed()
    }));
    assert!(waited >= Duration::from_millis(40), "{waited:?}");
}

#[test]
fn a_sleep_off_a_loop_uses_smols_timer() {
    let start = Instant::now();
    block_on(sleep(Duration::from_millis(15)));
    assert!(start.elapsed() >= Duration::from_millis(15));
}

/// An echo server on the loop; the client is a plain blocking socket.
#[test]
fn a_stream_reads_every_byte_after_short_reads_and_sees_the_end() {
    let (_rt, h) = one_loop();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let listener = block_on(h.spawn(async move { Listener::adopt(std_listener) })).unwrap();
    let served = h.spawn(async move {
        let s = listener.accept().await?;
        let mut s = Stream::adopt(s)?;
        let mut total = 0usize;
        let mut buf = vec![0u8; 7];
        loop {
            // Small reads: most are full, so readiness stays; the last of a
            // burst is short and waits for the next edge.
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            total += n;
            s.write_all(&buf[..n]).await?;
        }
        s.close().await?;
        Ok::<_, std::io::Error>(total)
    });
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let mut echoed = Vec::new();
    for burst in 0..20u8 {
        let msg = vec![b'a' + burst % 26; 10 + burst as usize * 13];
        c.write_all(&msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
        echoed.extend(back);
        // Let the server drain and go back to waiting between bursts.
        std::thread::sleep(Duration::from_millis(2));
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert_eq!(block_on(served).unwrap(), echoed.len());
}

#[test]
fn connect_reaches_a_listener_and_fails_fast_on_a_closed_port() {
    let (_rt, h) = one_loop();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = std_listener.local_addr().unwrap().port();
    let joined = std::thread::spawn(move || {
        let (mut s, _) = std_listener.accept().unwrap();
        s.write_all(b"hello").unwrap();
    });
    // "hello" and the end usually arrive in one edge: the short read that
    // takes the bytes must not wait for another edge to see the end.
    let got = block_on(h.spawn(async move {
        let mut s = connect("127.0.0.1", port, Duration::from_secs(5)).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    }))
    .unwrap();
    assert_eq!(got, b"hello");
    joined.join().unwrap();
    // Nothing listens on the port any more.
    let err = block_on(h.spawn(async move { connect("127.0.0.1", port, Duration::from_secs(5)).await.err() }));
    assert_eq!(err.map(|e| e.kind()), Some(std::io::ErrorKind::ConnectionRefused));
    // Off a loop there is no loop to join.
    assert!(block_on(connect("127.0.0.1", port, Duration::from_secs(1))).is_err());
}

#[test]
fn wakers_called_from_other_threads_reach_the_loop() {
    let (_rt, h) = one_loop();
    let (tx, rx) = smol::channel::bounded::<u32>(1);
    let task = h.spawn(async move { rx.recv().await.ok() });
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        block_on(tx.send(7)).unwrap();
    });
    assert_eq!(block_on(task), Some(7));
    sender.join().unwrap();
}

#[test]
fn stopping_drops_waiting_tasks_and_closes_their_sockets() {
    let (mut rt, h) = one_loop();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    let listener = block_on(h.spawn(async move { Listener::adopt(std_listener) })).unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    struct Count(Arc<AtomicUsize>);
    impl Drop for Count {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let d = dropped.clone();
    h.spawn(async move {
        let _count = Count(d);
        let s = Stream::adopt(listener.accept().await.unwrap()).unwrap();
        // Waits for a request that never comes, or for a day.
        let mut buf = [0u8; 1];
        let mut s = s;
        let _ = async { s.read(&mut buf).await.ok() }
            .or(async {
                sleep(Duration::from_secs(86_400)).await;
                None
            })
            .await;
    })
    .detach();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    rt.stop();
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    // The server's side of the connection is closed: the client reads the end.
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(c.read(&mut buf).unwrap(), 0);
}

/// A socket whose loop has not looked at its edges since a read emptied it
/// may still have been closed: only its own loop's tasks can tell from the
/// edges alone. Here its loop is stopped, so it never looks; the peer's
/// close must still count as something that may have arrived elsewhere.
#[test]
fn off_its_own_loop_a_socket_may_always_have_news() {
    let (mut first, a) = one_loop();
    let (_second, b) = one_loop();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = std_listener.local_addr().unwrap().port();
    let stream = block_on(a.spawn(async move {
        let s = connect("127.0.0.1", port, Duration::from_secs(5)).await.unwrap();
        // A read that finds nothing: the socket is known empty.
        let mut buf = [0u8; 8];
        let nothing =
            futures_lite::future::poll_once(futures_lite::future::poll_fn(|cx| s.poll_read_buf(cx, &mut buf)));
        assert!(nothing.await.is_none(), "nothing was sent");
        assert!(!s.may_have_arrived(), "on its own loop, a socket read empty has nothing new");
        s
    }));
    let (peer, _) = std_listener.accept().unwrap();
    first.stop();
    drop(peer);
    let (news, open) = block_on(b.spawn(async move {
        let news = stream.may_have_arrived();
        (news, crate::h1::still_open(stream.socket()))
    }));
    assert!(news, "another loop cannot know from the edges that nothing arrived");
    assert!(!open, "and the probe it makes instead finds the close");
}

/// A socket dropped on another thread is forgotten by its loop, which is
/// rung for it: its slot does not outlive it.
#[test]
fn a_stream_dropped_on_another_thread_leaves_its_loop() {
    let (_rt, h) = one_loop();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = std_listener.local_addr().unwrap().port();
    let sources = || block_on(h.spawn(async { current().map(|l| l.sources.borrow().len()) }));
    let stream = block_on(h.spawn(async move { connect("127.0.0.1", port, Duration::from_secs(5)).await })).unwrap();
    let _accepted = std_listener.accept().unwrap();
    assert_eq!(sources(), Some(1));
    drop(stream);
    assert_eq!(sources(), Some(0));
}
