//! `nexus run --agents DIR` / `nexus resume` end to end: a sub-agent
//! defined in a Claude Code style Markdown file suspends inside its own
//! run; the CLI exits 3 with one pending request owned by the agent, and a
//! resume in another process answers it by its path-qualified id.

mod cli_support;

use cli_support::*;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::{json, Value};

macro_rules! per_style {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn anthropic() {
                super::$name("anthropic")
            }
            #[test]
            fn openai() {
                super::$name("openai")
            }
            #[test]
            fn gemini() {
                super::$name("gemini")
            }
        }
    )*};
}

per_style!(a_suspension_inside_an_agent_resumes_in_another_process);

const SEAT: &str = r#"{"questions":[{"question":"Window or aisle?","options":["window","aisle"]}]}"#;

/// `asker.md` (the agent), a broken file, and a second definition of `asker`.
fn agents_dir(dir: &std::path::Path) -> String {
    let agents = dir.join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("asker.md"),
        "---\nname: asker\ndescription: Asks the traveller what they prefer\ntools: question\n\
         model: child-model\nmax_turns: 4\n---\nYou find out what the traveller wants. Ask, then report.\n",
    )
    .unwrap();
    std::fs::write(agents.join("broken.md"), "---\nname: broken\ndescription: d\nmax_turns: lots\n---\nbody\n")
        .unwrap();
    std::fs::write(agents.join("zz-again.md"), "---\nname: asker\ndescription: the second asker\n---\nbody\n").unwrap();
    agents.to_string_lossy().into_owned()
}

fn scripts(style: &str) -> Scripts {
    let mut delegate = Turn::default().call_with_id("c_del", "asker", r#"{"prompt": "which seat?"}"#);
    let mut ask = Turn::default().call_with_id("q_seat", "question", SEAT);
    if style == "gemini" {
        delegate = delegate.with_ids();
        ask = ask.with_ids();
    }
    Scripts::new(KEY)
        .model("parent-model", Script::new(vec![delegate, Turn::text("Booked the window seat.")]))
        .model("child-model", Script::new(vec![ask, Turn::text("They want the window.")]))
}

fn a_suspension_inside_an_agent_resumes_in_another_process(style: &str) {
    let dir = scratch("agents");
    let fake = fake(scripts(style));
    let agents = agents_dir(&dir);
    let out = run(run_cmd(
        &dir,
        &fake,
        style,
        "parent-model",
        &["--builtins=question", "--agents", &agents, "--state", "st.json", "--json", "book my seat"],
    ))
    .expect(3);
    assert!(out.stderr.contains("broken.md:4: max_turns"), "the broken file is named with its line: {}", out.stderr);
    assert!(out.stderr.contains("zz-again.md") && out.stderr.contains("already defined"), "{}", out.stderr);
    let result = out.json();
    let pending = result["pending"].as_array().cloned().unwrap_or_default();
    assert_eq!(pending.len(), 1, "{result}");
    let id = pending[0]["id"].as_str().unwrap_or_default().to_string();
    let agent = pending[0]["agent"].as_str().unwrap_or_default().to_string();
    assert!(!agent.is_empty() && id.starts_with(&format!("{agent}/pnd_")), "{}", pending[0]);
    assert_eq!(pending[0]["kind"], "question");
    assert_eq!(result["agents"][0]["name"], "asker");
    assert_eq!(result["agents"][0]["status"], "pending");
    assert_eq!(fake.requests_for("child-model").len(), 1);
    let state = std::fs::read(dir.join("st.json")).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&state).contains(KEY), "no key in the state");

    let answers = write_json(&dir, "a.json", &json!({"id": id, "ok": true, "data": {"answer": "window"}}));
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "st.json", "--answer", &answers, "--json"]);
    let done = run(&mut resume).expect(0).json();
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["text"], "Booked the window seat.");
    assert_eq!(done["toolCalls"][0]["output"], "They want the window.");
    assert_eq!(done["agents"][0]["turns"], 2);
    assert!(done["agents"][0]["usage"]["totalTokens"].as_u64().unwrap_or(0) > 0, "{done}");
    // Each model call once: the child twice, the parent twice; the answer reached the child's tool.
    assert_eq!(fake.requests_for("child-model").len(), 2);
    assert_eq!(fake.requests_for("parent-model").len(), 2);
    let body = fake.requests_for("child-model").last().and_then(|r| r.json.clone()).unwrap_or(Value::Null);
    let turns = result_turns(style, &body);
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert!(turns[0][0].contains("window"), "{turns:?}");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

#[test]
fn tools_lists_the_agents_as_tools() {
    let dir = scratch("agents-tools");
    let agents = agents_dir(&dir);
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--builtins=question", "--agents", &agents, "--style", "openai"]);
    let out = run(&mut cmd).expect(0);
    let v = out.json();
    let names: Vec<&str> =
        v["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert_eq!(names, vec!["question", "asker"]);
    assert_eq!(v["agents"][0]["name"], "asker");
    assert_eq!(v["agents"][0]["tools"], json!(["question"]));
    assert_eq!(v["agents"][0]["maxTurns"], 4);
    assert!(out.stderr.contains("broken.md:4"), "{}", out.stderr);
}
