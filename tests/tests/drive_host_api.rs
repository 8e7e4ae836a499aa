//! The host API end to end against the fake provider, in both drivers: a
//! resume that cannot run an approved call is refused with the stored run
//! untouched, a person's decline reason reaches the model, declarative
//! approvals, and the order of tool outputs and model inputs kept on the wire.

#[macro_use]
mod drive_support;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use drive_support::*;
use nexus_drive::{Answer, DriveError, DynTool, MemoryRunStore, RunInput, RunStatus, RunStore, ToolOutcome};
use nexus_tests::fake::{FakeProvider, Scripts, Style, Turn};
use serde_json::json;

both_drivers!(
    a_resume_that_cannot_run_an_approved_call_is_refused_and_the_stored_run_kept,
    needs_approval_asks_in_process_runs_on_yes_and_tells_the_model_why_not,
    an_approval_is_durable_and_the_stored_run_streams_through_the_same_entry_point,
    a_struct_output_reaches_the_model_in_field_order,
);

/// A `refund` tool counting its runs.
fn refund_tool(runs: &Arc<std::sync::atomic::AtomicUsize>) -> DynTool {
    let runs = runs.clone();
    DynTool::new("refund", "refunds an order", json!({"type": "object"}), move |args, ctx| {
        assert!(ctx.answer().is_none(), "the tool never sees the approval as its own answer");
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutcome::Done(json!(format!("refunded {}", args["order_id"].as_str().unwrap_or("?")))))
    })
}

fn needs_approval_asks_in_process_runs_on_yes_and_tells_the_model_why_not(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let call = Turn::default().call("refund", r#"{"order_id":"A1","cents":4000}"#);
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-yes", script(vec![call.clone(), Turn::text("refunded")]))
                .model("m-no", script(vec![call, Turn::text("not refunded")])),
        );
        let runs = counter();
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let client = |model: &str, yes: bool| {
            let seen = asked.clone();
            d.client(
                builder(&fake, style, model, false)
                    .needs_approval("refund", true)
                    .dyn_tool(refund_tool(&runs))
                    .wait_for(move |request| {
                        seen.lock().unwrap().push(request.clone());
                        if yes {
                            Answer::ok(request.id, None)
                        } else {
                            Answer::declined(request.id, "customer not eligible")
                        }
                    })
                    .build()
                    .unwrap(),
            )
        };

        let done = client("m-yes", true).run("refund A1").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.status, RunStatus::Done, "{ctx}");
        assert_eq!(outputs(&done), vec!["refunded A1".to_string()], "{ctx}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}: ran once, after the yes");
        let request = asked.lock().unwrap()[0].clone();
        assert_eq!(request.kind, "approval", "{ctx}");
        assert_eq!(request.prompt, r#"Allow refund to run with {"order_id":"A1","cents":4000}?"#, "{ctx}");
        let data = serde_json::Value::Object(request.data.clone().unwrap());
        assert_eq!(
            data,
            json!({"source": "needs_approval", "tool": "refund", "input": {"order_id": "A1", "cents": 4000}})
        );

        let declined = client("m-no", false).run("refund A1 again").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(declined.text, "not refunded", "{ctx}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}: a declined call never runs");
        let want =
            r#"declined: Allow refund to run with {"order_id":"A1","cents":4000}? — reason: customer not eligible"#;
        assert_eq!(transcript_results(&declined), vec![want.to_string()], "{ctx}");
        // The reason reached the model: it is in the next request's bytes.
        let last = fake.requests_for("m-no").last().cloned().expect("requests");
        let body = String::from_utf8(last.body).unwrap();
        assert!(body.contains("reason: customer not eligible"), "{ctx}: {body}");
    }
}

fn an_approval_is_durable_and_the_stored_run_streams_through_the_same_entry_point(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(Scripts::new(KEY).model(
            "m-durable",
            script(vec![
                    Turn::default()
                        .call("refund", r#"{"order_id":"B2","cents":90}"#)
                        .call("refund", r#"{"order_id":"C3","cents":5000}"#),
                    Turn::text("one refunded, one asked"),
                ]),
        ));
        let runs = counter();
        let make = || {
            d.client(
                builder(&fake, style, "m-durable", true)
                    .dyn_tool(refund_tool(&runs).needs_approval(nexus_drive::ApprovalPolicy::when(|args| {
                        args["cents"].as_u64().is_some_and(|c| c > 1000)
                    })))
                    .build()
                    .unwrap(),
            )
        };
        let first = make().run("refund both").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(first.status, RunStatus::Pending, "{ctx}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}: the small refund ran, the large one waits");
        let suspended = first.suspended.expect("suspended");
        assert_eq!(suspended.pending.len(), 1, "{ctx}");
        assert_eq!(suspended.pending[0].kind, "approval", "{ctx}");

        let store = Arc::new(MemoryRunStore::new());
        store.save(&suspended.run_id, &suspended.state, None).unwrap();
        // Another process: a fresh client, the store, the outstanding requests read from it.
        let second = make();
        let outstanding = store.outstanding(&suspended.run_id).unwrap();
        assert_eq!(outstanding, suspended.pending, "{ctx}");
        let answer = Answer::ok(outstanding[0].id.clone(), None);
        let (events, end) = second.stream(RunInput::stored(store.clone(), suspended.run_id.clone(), vec![answer]));
        let done = end.unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.text, "one refunded, one asked", "{ctx}");
        assert_eq!(shown_text(&events), "one refunded, one asked", "{ctx}: streamed as it came");
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{ctx}: each refund ran once");
        assert_eq!(transcript_results(&done), vec!["refunded B2".to_string(), "refunded C3".to_string()], "{ctx}");
        assert!(store.load(&suspended.run_id).unwrap().is_none(), "{ctx}: a finished stored run is removed");
    }
}

fn a_struct_output_reaches_the_model_in_field_order(d: Drv) {
    // The model writes its keys out of byte order, with spaces (as streamed
    // arguments come); every style sends them back in the model's order.
    let sent = r#"{"zeta": 1, "alpha": 2}"#;
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let fake = FakeProvider::start(
                Scripts::new(KEY)
                    .model("m-order", script(vec![Turn::default().call("lookup", sent), Turn::text("ok")])),
            );
            let client =
                d.client(builder(&fake, style, "m-order", stream).tool(tool_attribute::lookup).build().unwrap());
            let done = client.run("look").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let text = r#"{"status":"queued","amount":40,"currency":"EUR"}"#;
            assert_eq!(outputs(&done), vec![text.to_string()], "{ctx}");
            let last = fake.requests().last().cloned().expect("requests");
            let body = String::from_utf8(last.body).unwrap();
            let escaped = serde_json::to_string(text).unwrap();
            assert!(body.contains(escaped.trim_matches('"')), "{ctx}: {body}");
            // Chat Completions and Responses carry the arguments as a string,
            // byte for byte; Anthropic `input` and Gemini `args` are objects,
            // written compact in the model's key order.
            let input = match style {
                Style::OpenAi | Style::OpenAiResponses => serde_json::to_string(sent).unwrap(),
                _ => r#"{"zeta":1,"alpha":2}"#.to_string(),
            };
            assert!(body.contains(&input), "{ctx}: the model's input as it sent it: {body}");
        }
    }
}

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

mod tool_attribute {
    use nexus_drive::{tool, AsyncTool, Tool, ToolContext, ToolError, ToolOutcome, Toolbox};
    use serde::Deserialize;
    use serde_json::{json, Value};

    /// Adds two integers.
    ///
    /// # Arguments
    /// * `a` - The first addend.
    /// * `b` - The second addend.
    #[tool]
    #[inline] // an attribute for the function stays on the function
    pub fn add(a: i64, b: i64) -> i64 {
        a + b
    }

    /// Adds two integers.
    ///
    /// # Arguments
    /// * `a` - The first addend.
    /// * `b` - The second addend.
    #[tool(name = "add")]
    pub async fn add_later(ctx: ToolContext, a: i64, b: i64) -> Result<i64, ToolError> {
        if ctx.is_cancelled() {
            return Err(ToolError::msg("cancelled"));
        }
        Ok(a + b)
    }

    /// Refunds an order.
    #[tool(needs_approval = large)]
    pub fn refund(ctx: &ToolContext, order_id: String, cents: u64, note: Option<String>) -> ToolOutcome<String> {
        ToolOutcome::Done(format!("{} refunded {cents} on {order_id} ({note:?})", ctx.call_id()))
    }

    #[derive(serde::Serialize)]
    pub struct Receipt {
        status: &'static str,
        amount: u32,
        currency: &'static str,
    }

    /// Looks something up.
    #[tool]
    pub fn lookup(zeta: i64, alpha: i64) -> Receipt {
        let _ = (zeta, alpha);
        Receipt { status: "queued", amount: 40, currency: "EUR" }
    }

    fn large(args: &Value) -> bool {
        args["cents"].as_u64().is_some_and(|c| c > 1000)
    }

    #[derive(Deserialize)]
    pub struct AddArgs {
        #[allow(dead_code)]
        a: i64,
        #[allow(dead_code)]
        b: i64,
    }

    /// The same tool written by hand, schema and all.
    struct HandAdd;
    impl Tool for HandAdd {
        const NAME: &'static str = "add";
        type Args = AddArgs;
        type Output = i64;
        fn description(&self) -> String {
            "Adds two integers.".into()
        }
        fn input_schema(&self) -> Option<Value> {
            Some(json!({
                "type": "object",
                "properties": {
                    "a": {"description": "The first addend.", "type": "integer", "format": "int64"},
                    "b": {"description": "The second addend.", "type": "integer", "format": "int64"},
                },
                "required": ["a", "b"],
            }))
        }
        fn call(&self, args: AddArgs, _: &ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
            Ok(ToolOutcome::Done(args.a + args.b))
        }
    }

    fn decl_of(register: impl FnOnce(&mut Toolbox)) -> nexus_drive::ToolDecl {
        let mut tb = Toolbox::new();
        register(&mut tb);
        tb.decls().remove(0)
    }

    #[test]
    fn sync_and_async_functions_declare_what_the_hand_written_tool_does() {
        let hand = decl_of(|tb| {
            tb.add(HandAdd).unwrap();
        });
        let sync = decl_of(|tb| {
            tb.add(add).unwrap();
        });
        let asynchronous = decl_of(|tb| {
            tb.add_async(add_later).unwrap();
        });
        assert_eq!(sync, hand);
        assert_eq!(asynchronous, hand);
        assert_eq!(serde_json::to_string(&sync).unwrap(), serde_json::to_string(&hand).unwrap(), "same bytes");
        // The functions stay callable as written.
        assert_eq!(add::function(2, 3), 5);
        assert_eq!(smol::block_on(add_later::function(ToolContext::new("c", "add"), 2, 3)), Ok(5));
        assert_eq!(<add_later as AsyncTool>::NAME, "add");
    }

    #[test]
    fn options_are_not_required_and_the_context_is_no_property() {
        let schema = refund.input_schema().unwrap();
        assert_eq!(schema["required"], json!(["order_id", "cents"]));
        let props: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(props, ["cents", "note", "order_id"]);
        assert!(refund.needs_approval().applies_to(&json!({"order_id": "A", "cents": 5000})));
        assert!(!refund.needs_approval().applies_to(&json!({"order_id": "A", "cents": 50})));
        assert!(add.needs_approval().is_never());
    }
}
