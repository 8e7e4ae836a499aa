//! Both drivers: a run started suspended on host requests
//! (`stream_awaiting`, SPEC §4 rule 7) makes no model call, keeps as an
//! ordinary suspended state, refuses its host request as an answer, and —
//! once the host settles it with the tools it brought — runs them, the
//! first model call declaring them.

#[macro_use]
mod drive_support;

use drive_support::*;
use nexus_drive::{Answer, DriveError, Request, RunStatus, StreamItem};
use nexus_tests::fake::{FakeProvider, Scripts, Turn};

both_drivers!(a_run_waits_for_its_host_requests_then_declares_and_runs_the_tools_they_bring);

fn awaiting(d: Drv, cfg: nexus_drive::ClientConfig, prompt: &str, requests: Vec<Request>) -> nexus_drive::RunResult {
    let items: Vec<Result<StreamItem, DriveError>> = match d {
        Drv::Blocking => nexus_drive::blocking::Client::new(cfg).stream_awaiting(prompt, requests).collect(),
        Drv::Async => smol::block_on(async {
            use smol::stream::StreamExt;
            nexus_drive::asynchronous::AsyncClient::new(cfg).stream_awaiting(prompt, requests).collect::<Vec<_>>().await
        }),
    };
    match items.into_iter().last() {
        Some(Ok(StreamItem::Done(r))) => r,
        other => panic!("the stream ended with {other:?}"),
    }
}

fn login() -> Request {
    let mut r = Request::new("authorization", "authorize the server");
    r.id = "authorize-notes-1".into();
    r.url = Some("http://127.0.0.1:9/authorize?state=s".into());
    r
}

fn a_run_waits_for_its_host_requests_then_declares_and_runs_the_tools_they_bring(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-host", script(vec![Turn::default().call("notes__whoami", "{}"), Turn::text("you are you")])),
        );
        let r = awaiting(d, builder(&fake, style, "m-host", false).build().unwrap(), "who am I?", vec![login()]);
        assert_eq!(r.status, RunStatus::Pending, "{ctx}");
        assert_eq!(r.pending, vec![login()], "{ctx}");
        assert!(fake.requests().is_empty(), "{ctx}: a model call before the host settled");
        let state = r.suspended.expect("a pending result carries its state").state;

        // The tools exist now (a server listed them after the login).
        let ran = counter();
        let seen = ran.clone();
        let whoami = ok_tool("notes__whoami", move |_, _| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            "an authorized client".into()
        });
        let fresh = d.client(builder(&fake, style, "m-host", false).dyn_tool(whoami).build().unwrap());
        // The host request is not a run input: refused, nothing sent.
        let err = fresh.resume(&state, vec![Answer::ok("authorize-notes-1", None)]).unwrap_err();
        assert!(matches!(err, DriveError::Input(_)), "{ctx}: {err:?}");
        // Resumed unsettled: still pending on it.
        let still = fresh.resume(&state, vec![]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(still.pending, vec![login()], "{ctx}");
        assert!(fake.requests().is_empty(), "{ctx}");

        let mut run = nexus_proto::Run::restore(&state).unwrap();
        let decl = nexus_drive::ToolDecl::new(
            "notes__whoami",
            "the notes__whoami tool",
            serde_json::json!({"type": "object"}),
        );
        run.settle_host("authorize-notes-1", vec![decl]).unwrap();
        let done = fresh.resume(&run.snapshot(), vec![]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.status, RunStatus::Done, "{ctx}");
        assert_eq!(outputs(&done), ["an authorized client"], "{ctx}");
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1, "{ctx}: the tool ran once");
        let first = String::from_utf8_lossy(&fake.requests()[0].body).into_owned();
        assert!(first.contains("notes__whoami"), "{ctx}: the first model call declares the settled tool");
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}
