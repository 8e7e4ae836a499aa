//! Random run trees (depth up to 3, every wire format, tools that suspend)
//! answered in random orders and batches and restored at random points end
//! exactly as the same tree run straight through.

mod sim;
mod tree;

use nexus_proto::{AgentSpec, Message, Outcome, Output, Run, Style};
use proptest::prelude::*;
use sim::{Stop, Turn};
use tree::{call, config, delegate, tools, Tree};

/// The agents of the tree, each with the ones it may delegate to:
/// top → a1, a2; a1 → b1; b1 → c1 (depth 3).
const NODES: [(&str, Style, &[&str]); 5] = [
    ("", Style::OpenAi, &["a1", "a2"]),
    ("a1", Style::Anthropic, &["b1"]),
    ("a2", Style::Gemini, &[]),
    ("b1", Style::OpenAiResponses, &["c1"]),
    ("c1", Style::OpenAi, &[]),
];

fn node(name: &str) -> (&'static str, Style, &'static [&'static str]) {
    *NODES.iter().find(|n| n.0 == name).unwrap()
}

fn spec(name: &str) -> AgentSpec {
    let (_, style, subs) = node(name);
    let mut s = tree::agent(name, style);
    for sub in subs {
        s.config = s.config.with_agent(spec(sub));
    }
    s
}

fn id_prefix(style: Style) -> &'static str {
    match style {
        Style::Anthropic => "toolu_",
        _ => "call_",
    }
}

/// Each node's first turn: calls picked by `choices` (0 approve, 1 echo,
/// 2.. a sub-agent), then a final text naming the node.
fn scripts(choices: &[Vec<u8>]) -> Vec<(&'static str, Style, Vec<Turn>)> {
    NODES
        .iter()
        .zip(choices)
        .map(|((name, style, subs), picks)| {
            let calls: Vec<_> = picks
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let id = format!("{}{name}x{i}", id_prefix(*style));
                    match (*p as usize, subs.len()) {
                        (0, _) => call(&id, "approve"),
                        (n, s) if n >= 2 && s > 0 => delegate(&id, subs[(n - 2) % s], &format!("task {i}")),
                        _ => call(&id, "echo"),
                    }
                })
                .collect();
            (*name, *style, tree::script(vec![calls], &format!("{name} finished")))
        })
        .collect()
}

fn new_tree(choices: &[Vec<u8>]) -> Tree {
    let (_, style, subs) = node("");
    let mut cfg = config(style, "");
    for sub in subs {
        cfg = cfg.with_agent(spec(sub));
    }
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    Tree::new(run, scripts(choices))
}

struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// What a finished tree is judged by.
#[derive(Debug, PartialEq)]
struct Ending {
    outcome: Outcome,
    transcript: Vec<Message>,
    reports: Vec<(String, String, u32, u64, String)>,
    completed: Vec<String>,
}

fn ending(t: &Tree, outcome: Outcome) -> Ending {
    let mut reports: Vec<_> =
        t.run.agent_reports().into_iter().map(|r| (r.path, r.name, r.turns, r.usage.total_tokens, r.status)).collect();
    reports.sort();
    let mut completed = t.completed.clone();
    completed.sort();
    Ending { outcome, transcript: t.run.transcript().to_vec(), reports, completed }
}

/// Straight through: every suspension answered at once, in order.
fn uninterrupted(choices: &[Vec<u8>]) -> Ending {
    let mut t = new_tree(choices);
    loop {
        match t.drive() {
            Stop::Done(o) => return ending(&t, o),
            Stop::Suspended(reqs) => {
                for r in reqs {
                    t.answer(&r.id).unwrap();
                }
            }
        }
    }
}

/// Driven with restores between outputs and answers in random batches and orders.
fn interrupted(choices: &[Vec<u8>], seed: u64, restore_one_in: usize) -> (Ending, Vec<String>) {
    let mut t = new_tree(choices);
    let mut dice = Dice(seed);
    let mut answered = Vec::new();
    for _ in 0..20_000 {
        if dice.below(restore_one_in) == 0 {
            t.reload();
        }
        match t.run.poll_output() {
            Output::Send(req) => t.serve(&req),
            Output::RunTools(batch) => {
                let mut calls = batch.calls;
                // Replies in a random order.
                for i in (1..calls.len()).rev() {
                    calls.swap(i, dice.below(i + 1));
                }
                for inv in &calls {
                    t.reply(inv);
                }
            }
            Output::Event(e) => t.events.push(e),
            Output::Wait { until: Some(at) } => {
                t.now = t.now.max(at);
                t.run.handle_input(t.now, nexus_proto::Input::Timeout).unwrap();
            }
            Output::Wait { until: None } => panic!("waiting with nothing in flight"),
            Output::Suspended(mut reqs) => {
                assert!(!reqs.is_empty());
                for r in &reqs {
                    let owner = t.run.request_owner(&r.id).expect("every request has an owner");
                    assert!(r.id.starts_with(&owner), "{} owned by {owner}", r.id);
                }
                for i in (1..reqs.len()).rev() {
                    reqs.swap(i, dice.below(i + 1));
                }
                let take = 1 + dice.below(reqs.len());
                for r in reqs.into_iter().take(take) {
                    t.answer(&r.id).unwrap();
                    assert!(t.answer(&r.id).is_err(), "a second answer to {} is refused", r.id);
                    answered.push(r.id);
                    if dice.below(3) == 0 {
                        t.reload();
                    }
                }
            }
            Output::Done(o) => return (ending(&t, o), answered_reached(&t, &answered)),
        }
    }
    panic!("no progress");
}

/// Every answered approval re-ran, with its answer, in the call it was for:
/// `P/pnd_C` answered means `P/C` ran with an answer. Returns the answered ids.
fn answered_reached(t: &Tree, answered: &[String]) -> Vec<String> {
    for id in answered {
        let (path, last) = id.rsplit_once('/').map_or(("", id.as_str()), |(p, l)| (p, l));
        let call = last.strip_prefix("pnd_").unwrap_or_else(|| panic!("unexpected request {id}"));
        let qualified = if path.is_empty() { call.to_string() } else { format!("{path}/{call}") };
        assert!(t.executed.contains(&(qualified.clone(), true)), "the answer to {id} never reached {qualified}");
    }
    let mut ids = answered.to_vec();
    ids.sort();
    ids
}

fn choices() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(0u8..5, 1..=3), NODES.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn restore_anywhere_and_any_answer_order_end_as_the_uninterrupted_tree(
        choices in choices(),
        seed in any::<u64>(),
        restore_one_in in 1usize..8,
    ) {
        let straight = uninterrupted(&choices);
        let (ending, answered) = interrupted(&choices, seed, restore_one_in);
        prop_assert_eq!(&ending, &straight);
        prop_assert_eq!(&ending.outcome, &Outcome::Done);
        // No completed tool ran again.
        let mut unique = ending.completed.clone();
        unique.dedup();
        prop_assert_eq!(unique.len(), ending.completed.len());
        // Every request was answered exactly once, and every approval got one.
        let mut dedup = answered.clone();
        dedup.dedup();
        prop_assert_eq!(dedup.len(), answered.len());
        let approvals = ending.completed.iter().filter(|c| !c.is_empty()).count();
        prop_assert!(answered.len() <= approvals);
    }
}

#[test]
fn the_generator_reaches_depth_three_suspensions() {
    // top → a1 → b1 → c1, every level asking too.
    let choices = vec![vec![2, 0], vec![2, 0], vec![1], vec![2, 0], vec![0, 1]];
    let straight = uninterrupted(&choices);
    let (ending, answered) = interrupted(&choices, 7, 2);
    assert_eq!(ending, straight);
    assert_eq!(answered.len(), 4, "{answered:?}");
    assert!(answered.iter().any(|id| id.matches('/').count() == 3), "{answered:?}");
}
