//! `nexus demo` and the cassettes under `examples/cassettes/`.
//!
//! The demo cassettes are recordings of `nexus demo --record` against the
//! fake provider with the script below. `the_committed_demo_is_a_fresh_recording`
//! records them again and compares; run it with `NEXUS_REGENERATE=1` to write
//! the fresh recordings over the committed files (then rebuild: the binary
//! embeds them).

mod cli_support;

use std::path::{Path, PathBuf};

use cli_support::*;
use nexus_tests::fake::{ExpectFinal, Script, Scripts, Turn};

/// The demo's model and the story it tells; the tool results come from the
/// demo's own tools in the binary.
fn demo_scripts() -> Scripts {
    let turns = vec![
        Turn::text("Let me check the weather and count the bags.")
            .call("get_weather", r#"{"city": "Paris"}"#)
            .call("add", r#"{"a": 2, "b": 3}"#)
            .usage(412, 58),
        Turn::text("Sunny and 18°C. I'll book the table — it needs your OK.")
            .call("book_table", r#"{"restaurant": "Le Petit Zinc", "time": "20:00", "guests": 2}"#)
            .usage(530, 41),
        Turn::text(
            "All set: Paris will be 18°C and sunny, you have 5 bags between you, and your table for two at \
             Le Petit Zinc is booked for 20:00 (confirmation LPZ-2000).",
        )
        .usage(640, 52),
        Turn::default()
            .call(
                "send_email",
                r#"{"to": "sam@example.com", "subject": "Paris on Friday", "body": "Weather: 18°C and sunny. Bags: 5. Dinner: Le Petit Zinc at 20:00, table for two (confirmation LPZ-2000)."}"#,
            )
            .usage(702, 96),
        Turn::text("Done: the plan is in Sam's inbox (sam@example.com).").usage(830, 19),
    ];
    let expect = ExpectFinal {
        tool_result_contains: vec!["Paris: 18°C, sunny".into(), "LPZ-2000".into(), "Sent to sam@example.com".into()],
        tool_results: Some(4),
        messages: None,
    };
    Scripts::new(KEY).model("nexus-demo", Script::new(turns).expect_final(expect))
}

fn cassette_path(style: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/cassettes/demo-{style}.jsonl"))
}

/// Replaces what differs between two recordings of the same session: clock
/// readings (`at`, the state's `lastNow`), the fake's port, OpenAI's
/// `created` and Responses' `created_at` (seconds since the epoch in every response), and the order of
/// one batch's tool replies (its tools run concurrently; the machine records
/// results in call order whatever order they finish in).
fn normalize(text: &str) -> String {
    let mut lines: Vec<String> = normalize_values(text).lines().map(str::to_string).collect();
    let is_tool = |l: &String| l.starts_with(r#"{"type":"tool","#);
    let mut i = 0;
    while i < lines.len() {
        let run = lines[i..].iter().take_while(|l| is_tool(l)).count();
        lines[i..i + run].sort();
        i += run.max(1);
    }
    lines.join("\n")
}

fn normalize_values(text: &str) -> String {
    let mut s = text.to_string();
    for pattern in [r#""at":"#, r#""lastNow":"#, r#"\"created\":"#, r#"\"created_at\":"#, "127.0.0.1:"] {
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(i) = rest.find(pattern) {
            let (head, tail) = rest.split_at(i + pattern.len());
            out.push_str(head);
            let spaces = tail.len() - tail.trim_start_matches(' ').len();
            let after = &tail[spaces..];
            let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            out.push_str(&tail[..spaces]);
            out.push_str(if digits > 0 { "N" } else { "" });
            rest = &after[digits..];
        }
        out.push_str(rest);
        s = out;
    }
    s
}

fn record(style: &str, dir: &Path) -> String {
    let fake = fake(demo_scripts());
    let path = dir.join(format!("demo-{style}.jsonl"));
    let mut cmd = nexus(dir, Some(style));
    cmd.args(["demo", "--style", style, "--record"]).arg(&path).args(["--base-url", &fake.base_url(fake_style(style))]);
    run(&mut cmd).expect(0);
    assert!(fake.failures().is_empty(), "the fake's final checks: {:?}", fake.failures());
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

macro_rules! per_style {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn anthropic() {
                super::$name("anthropic");
            }
            #[test]
            fn openai() {
                super::$name("openai");
            }
            #[test]
            fn gemini() {
                super::$name("gemini");
            }
            #[test]
            fn openai_responses() {
                super::$name("openai-responses");
            }
        }
    )*};
}

per_style!(the_committed_demo_is_a_fresh_recording, the_demo_shows_the_whole_loop);

fn the_committed_demo_is_a_fresh_recording(style: &str) {
    let dir = scratch("demo-record");
    let fresh = record(style, &dir);
    assert!(!fresh.contains(KEY), "the key is redacted");
    let committed_path = cassette_path(style);
    if std::env::var_os("NEXUS_REGENERATE").is_some() {
        std::fs::write(&committed_path, &fresh).unwrap_or_else(|e| panic!("{}: {e}", committed_path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
    let (a, b) = (normalize(&committed), normalize(&fresh));
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        assert_eq!(
            x,
            y,
            "{} line {} differs from a fresh recording (NEXUS_REGENERATE=1 rewrites it)",
            committed_path.display(),
            i + 1
        );
    }
    assert_eq!(a.lines().count(), b.lines().count(), "{}: line count", committed_path.display());
}

fn the_demo_shows_the_whole_loop(style: &str) {
    let dir = scratch("demo-show");
    let mut cmd = nexus(&dir, None);
    cmd.args(["demo", "--style", style]);
    let out = run(&mut cmd).expect(0);
    let text = out.stdout;
    for needle in [
        "[turn 1]",
        "get_weather({\"city\": \"Paris\"})",
        "add({\"a\": 2, \"b\": 3})",
        "← result get_weather: Paris: 18°C, sunny",
        "← result add: 5",
        "⏸ approval request",
        "Book a table for 2 at Le Petit Zinc at 20:00?",
        "✔ answer",
        "re-run book_table",
        "confirmation LPZ-2000",
        "Send an email to sam@example.com",
        "state saved to",
        "resumed from its saved state",
        "Sent to sam@example.com",
        "final:    Done: the plan is in Sam's inbox (sam@example.com).",
        "replay matches the recording: 2 run(s), 5 request(s) byte-identical; the session ends done",
    ] {
        assert!(text.contains(needle), "the trace shows {needle:?}:\n{text}");
    }
    // In order: the in-process approval comes before the durable stop.
    let approval = text.find("re-run book_table").unwrap_or(usize::MAX);
    let stop = text.find("state saved to").unwrap_or(0);
    assert!(approval < stop, "{text}");
}

#[test]
fn the_default_demo_needs_no_key_and_no_network() {
    let dir = scratch("demo-default");
    let out = run(nexus(&dir, None).arg("demo")).expect(0);
    assert!(out.stdout.contains("anthropic"), "{}", out.stdout);
    assert!(out.stdout.contains("the session ends done"), "{}", out.stdout);
}

#[test]
fn every_example_cassette_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cassettes");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.map(|e| e.path()).unwrap_or_default();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let out = run(nexus(&dir, None).arg("replay").arg(&path)).expect(0);
        assert!(out.stdout.contains("replay matches the recording"), "{}: {}", path.display(), out.stdout);
        n += 1;
    }
    assert!(n >= 3, "the demo cassettes at least ({n})");
}

#[test]
fn normalize_hides_only_clocks_ports_and_created() {
    let a = r#"{"at":1796228093964,"url":"http://127.0.0.1:36453/v1","text":"{\"created\": 1796228093, \"id\": \"x\"}","lastNow":5}"#;
    let b = r#"{"at":1,"url":"http://127.0.0.1:80/v1","text":"{\"created\": 2, \"id\": \"x\"}","lastNow":77}"#;
    assert_eq!(normalize(a), normalize(b));
    let (t1, t2) = (r#"{"type":"tool","callId":"1"}"#, r#"{"type":"tool","callId":"2"}"#);
    assert_eq!(
        normalize(&format!("x\n{t1}\n{t2}\ny")),
        normalize(&format!("x\n{t2}\n{t1}\ny")),
        "a batch's replies in any order"
    );
    assert_ne!(
        normalize(&format!("{t1}\nx\n{t2}")),
        normalize(&format!("{t2}\nx\n{t1}")),
        "but not across other lines"
    );
    let c = r#"{"at":1,"url":"http://127.0.0.1:80/v1","text":"{\"created\": 2, \"id\": \"y\"}","lastNow":77}"#;
    assert_ne!(normalize(a), normalize(c));
}
