//! Which built-ins are on, their declarations, and the tools that touch
//! neither files nor the network: `question` and `todowrite`.
#![cfg(feature = "builtins")]

use nexus_drive::builtins::{Builtins, UnknownBuiltin};
use nexus_drive::{Answer, ToolContext, ToolOutcome, Toolbox, ToolboxError, RESERVED_BUILTINS};
use serde_json::{json, Value};

#[test]
fn everything_is_off_until_the_host_turns_it_on() {
    let b = Builtins::default();
    assert!(b.enabled().is_empty());
    assert!(b.tools().is_empty());
    let err = b.call("read", json!({"path": "x"}), &ToolContext::new("c", "read")).unwrap_err();
    assert_eq!(err.message(), "the built-in tool read is not enabled");

    let all = Builtins::default().enable_all();
    assert_eq!(all.enabled(), RESERVED_BUILTINS);
    let names: Vec<String> = all.tools().iter().map(|t| t.decl().name.clone()).collect();
    assert_eq!(names, RESERVED_BUILTINS);
}

#[test]
fn selection_by_name_keeps_the_canonical_order_and_refuses_unknown_names() {
    let b = Builtins::default().select(Some(" grep, read ,,")).unwrap();
    assert_eq!(b.enabled(), ["read", "grep"]);
    assert_eq!(Builtins::default().select(None).unwrap().enabled(), RESERVED_BUILTINS);
    let b = Builtins::default().enable_all().set("bash", false).unwrap().set("webfetch", false).unwrap();
    assert!(!b.is_enabled("bash") && !b.is_enabled("webfetch") && b.is_enabled("read"));
    assert_eq!(b.enabled().len(), RESERVED_BUILTINS.len() - 2);

    let err = Builtins::default().select(Some("read,rm")).unwrap_err();
    assert_eq!(err, UnknownBuiltin("rm".into()));
    assert!(err.to_string().starts_with("\"rm\" is not a built-in tool (the built-ins are: bash, read,"), "{err}");
}

#[test]
fn every_schema_is_a_closed_object_and_required_fields_are_declared() {
    for tool in Builtins::default().enable_all().tools() {
        let decl = tool.decl();
        let schema = &decl.input_schema;
        assert_eq!(schema["type"], "object", "{}", decl.name);
        assert_eq!(schema["additionalProperties"], false, "{}", decl.name);
        assert!(!decl.description.is_empty(), "{}", decl.name);
        let props = schema["properties"].as_object().unwrap();
        for required in schema["required"].as_array().unwrap() {
            assert!(props.contains_key(required.as_str().unwrap()), "{}: {required}", decl.name);
        }
    }
    // The upstream names of the arguments.
    let decls: Vec<(String, Value)> = Builtins::default()
        .enable_all()
        .tools()
        .iter()
        .map(|t| (t.decl().name.clone(), t.decl().input_schema.clone()))
        .collect();
    let required = |name: &str| decls.iter().find(|(n, _)| n == name).unwrap().1["required"].clone();
    assert_eq!(required("bash"), json!(["command"]));
    assert_eq!(required("read"), json!(["path"]));
    assert_eq!(required("write"), json!(["path", "content"]));
    assert_eq!(required("edit"), json!(["path", "oldString", "newString"]));
    assert_eq!(required("grep"), json!(["pattern"]));
    assert_eq!(required("glob"), json!(["pattern"]));
    assert_eq!(required("webfetch"), json!(["url"]));
    assert_eq!(required("question"), json!(["questions"]));
    assert_eq!(required("apply_patch"), json!(["patchText"]));
    assert_eq!(required("todowrite"), json!(["todos"]));
}

#[test]
fn the_builtins_go_into_a_toolbox_and_a_relay_still_cannot_take_their_names() {
    let mut toolbox = Toolbox::new();
    Builtins::default().only(["read", "question"]).unwrap().add_to(&mut toolbox).unwrap();
    assert_eq!(toolbox.names().collect::<Vec<_>>(), ["read", "question"]);
    // `bash` is off here, and a relay still may not be called that.
    assert!(matches!(toolbox.add_relay("bash", "", Value::Null), Err(ToolboxError::RelayCollision(_))));
    // Adding the same built-ins twice is a duplicate.
    let again = Builtins::default().only(["read"]).unwrap().add_to(&mut toolbox).unwrap_err();
    assert_eq!(again, ToolboxError::Duplicate("read".into()));
}

fn question(args: Value, ctx: &ToolContext) -> ToolOutcome<Value> {
    Builtins::default().only(["question"]).unwrap().call("question", args, ctx).unwrap()
}

#[test]
fn question_suspends_with_the_contract_prompt_and_returns_the_answer_on_the_retry() {
    let args = json!({"questions": [
        {"question": "Pick a color?", "header": "Color", "options": ["red", "green"]},
        {"question": "Why?"},
        {"question": "Sizes?", "options": ["S", "M", "L"], "multiple": true},
        {"question": "Empty options?", "options": []}
    ]});
    let ToolOutcome::Pending(req) = question(args.clone(), &ToolContext::new("c1", "question")) else {
        panic!("question must suspend")
    };
    assert_eq!(req.kind, "question");
    assert_eq!(req.prompt, "Pick a color? (options: red, green)\nWhy?\nSizes? (options: S, M, L)\nEmpty options?");
    assert_eq!(req.data.as_ref().unwrap()["questions"], args["questions"]);
    assert!(req.id.is_empty(), "the run stamps the id");
    // Byte for byte the upstream acceptance case.
    let ToolOutcome::Pending(one) = question(
        json!({"questions": [{"question": "Pick a color?", "options": ["red", "green"]}]}),
        &ToolContext::new("c1", "question"),
    ) else {
        panic!()
    };
    assert_eq!(one.prompt, "Pick a color? (options: red, green)");
    let wire = serde_json::to_string(&one).unwrap();
    assert!(wire.starts_with(
        r#"{"id":"","kind":"question","prompt":"Pick a color? (options: red, green)","data":{"questions":"#
    ));

    let answer = Answer::ok("q1", json!({"answers": [["red"]], "note": "é"}).as_object().cloned());
    let out = question(args.clone(), &ToolContext::new("c1", "question").with_answer(answer));
    let ToolOutcome::Done(Value::String(text)) = out else { panic!("{out:?}") };
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"answers": [["red"]], "note": "é"}));
    let out = question(args, &ToolContext::new("c1", "question").with_answer(Answer::ok("q1", None)));
    assert_eq!(out, ToolOutcome::Done(Value::String("{}".into())));

    let b = Builtins::default().only(["question"]).unwrap();
    let ctx = ToolContext::new("c1", "question");
    // The array sent as a JSON string, as some models do, means the same.
    let stringified = json!({"questions": r#"[{"question":"Pick a color?","options":["red","green"]}]"#});
    let Ok(ToolOutcome::Pending(req)) = b.call("question", stringified, &ctx) else { panic!() };
    assert_eq!(req.prompt, "Pick a color? (options: red, green)");
    assert_eq!(req.data.unwrap()["questions"], json!([{"question": "Pick a color?", "options": ["red", "green"]}]));
    assert!(b.call("question", json!({"questions": []}), &ctx).is_err());
    assert!(b.call("question", json!({"questions": "Pick?"}), &ctx).is_err());
    assert!(b.call("question", json!({"questions": [{"header": "no text"}]}), &ctx).is_err());
}

#[test]
fn todowrite_renders_the_list_it_is_given() {
    let b = Builtins::default().only(["todowrite"]).unwrap();
    let ctx = ToolContext::new("c1", "todowrite");
    let out = b
        .call(
            "todowrite",
            json!({"todos": [
                {"id": "1", "text": "write tests", "completed": true},
                {"id": "2", "text": "ship", "completed": false},
                {"id": "3", "content": "other shape", "status": "completed"}
            ]}),
            &ctx,
        )
        .unwrap();
    assert_eq!(out, ToolOutcome::Done(Value::String("[x] write tests\n[ ] ship\n[x] other shape".into())));
    let out = b.call("todowrite", json!({"todos": []}), &ctx).unwrap();
    assert_eq!(out, ToolOutcome::Done(Value::String("(no todos)".into())));
    // Stateless: a second call shows only what it was given.
    let out = b.call("todowrite", json!({"todos": [{"id": "9", "text": "alone", "completed": false}]}), &ctx).unwrap();
    assert_eq!(out, ToolOutcome::Done(Value::String("[ ] alone".into())));
}
