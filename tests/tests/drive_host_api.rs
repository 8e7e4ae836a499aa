//! The host API end to end against the fake provider, in both drivers: a
//! resume that cannot run an approved call is refused with the stored run
//! untouched, a person's decline reason reaches the model, declarative
//! approvals, and the order of tool outputs and model inputs kept on the wire.

#[macro_use]
mod drive_support;

use std::sync::atomic::Ordering;

use drive_support::*;
use nexus_drive::{Answer, DriveError, MemoryRunStore, RunStore};
use nexus_tests::fake::{FakeProvider, Scripts, Turn};

both_drivers!(a_resume_that_cannot_run_an_approved_call_is_refused_and_the_stored_run_kept);

fn a_resume_that_cannot_run_an_approved_call_is_refused_and_the_stored_run_kept(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-keep", script(vec![Turn::default().call("transfer", r#"{"amount":5}"#), Turn::text("sent")])),
        );
        let (t, a) = (counter(), counter());
        let first = d.client(transfer_tools(builder(&fake, style, "m-keep", false), &t, &a).build().unwrap());
        let s = first.run("pay").unwrap().suspended.unwrap();
        let runs = MemoryRunStore::new();
        runs.save(&s.run_id, &s.state, None).unwrap();
        let approve = Answer::ok(s.pending[0].id.clone(), None);

        // A second process whose client lacks `transfer`: refused, nothing sent, the run as stored.
        let lacking = d.client(builder(&fake, style, "m-keep", false).build().unwrap());
        let sent = fake.requests().len();
        let err = lacking.resume_stored(&runs, &s.run_id, vec![approve.clone()]).unwrap_err();
        assert_eq!(
            err,
            DriveError::MissingTool {
                tool: "transfer".into(),
                call_id: s.pending[0].id.trim_start_matches("pnd_").into()
            },
            "{ctx}"
        );
        assert_eq!(fake.requests().len(), sent, "{ctx}: nothing sent");
        let rec = runs.load(&s.run_id).unwrap().expect("still stored");
        assert!(!rec.claimed, "{ctx}: the claim is released");
        assert_eq!(rec.state, s.state, "{ctx}: byte-identical");
        // The same refusal from a plain resume of the bytes.
        assert!(
            matches!(lacking.resume(&s.state, vec![approve.clone()]), Err(DriveError::MissingTool { .. })),
            "{ctx}"
        );

        // A client with the tool finishes it: the approval was not lost.
        let done = first.resume_stored(&runs, &s.run_id, vec![approve]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.text, "sent", "{ctx}");
        assert_eq!(outputs(&done), vec!["sent 5".to_string()], "{ctx}");
        assert_eq!(t.load(Ordering::SeqCst), 2, "{ctx}: suspended once, ran once");
    }
}
