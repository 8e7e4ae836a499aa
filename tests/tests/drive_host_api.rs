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
