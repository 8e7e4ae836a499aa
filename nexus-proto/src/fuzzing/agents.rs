//! The sub-agent fuzz target body: [`nested_answers`] drives a saved run
//! tree (suspended in a grandchild, one child already finished) through
//! arbitrary answers, tool replies, responses and restores.

use arbitrary::Unstructured;
use serde_json::{Map, Value};

use super::machine::{wire, FakeTurn};
use crate::http::ExchangeId;
use crate::provider::Style;
use crate::run::{Input, Output, Run};
use crate::suspend::{Answer, Request, ToolReply, ToolResult};
use crate::time::Timestamp;

/// OpenAI top → Anthropic `researcher` → Gemini `deep`, the grandchild waiting
/// on an approval; the OpenAI Responses sibling `quick` finished.
const TREE: &[u8] = include_bytes!("../../tests/fixtures/state/v3-agent-tree-suspended-in-a-grandchild.json");

/// Feeds a saved tree arbitrary answers (outstanding ids, ids with a wrong or
/// missing path segment, ids under the finished child, duplicates, noise),
/// tool replies under any path, provider responses and restores.
///
/// Checks: no panic; an answer to an outstanding id is accepted and any
/// other is refused with a typed error; a refused input changes nothing
/// anywhere in the tree; every outstanding request has an owner whose path
/// prefixes its id; a restored tree snapshots the same; the run settles.
pub fn nested_answers(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(run) = Run::restore(TREE) else { panic!("the tree fixture does not restore") };
    let mut d = Driver { run, now: 2_000, open: Vec::new(), running: Vec::new(), answered: Vec::new() };
    let _ = d.go(&mut u);
}

struct Driver {
    run: Run,
    now: u64,
    /// Sends not yet answered: (exchange, style, streaming).
    open: Vec<(ExchangeId, Style, bool)>,
    running: Vec<String>,
    answered: Vec<String>,
}

impl Driver {
    fn go(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        for _ in 0..48 {
            self.poll();
            if u.is_empty() {
                break;
            }
            match u.int_in_range(0..=9)? {
                0..=3 => self.answer(u)?,
                4 | 5 => self.reply(u)?,
                6 | 7 => self.respond(u)?,
                8 => {
                    let _ = self.apply(Input::Timeout);
                }
                _ => self.restore(),
            }
        }
        Ok(())
    }

    fn apply(&mut self, input: Input<'_>) -> Result<(), crate::InputError> {
        let before = self.run.snapshot();
        let got = self.run.handle_input(Timestamp(self.now), input);
        if let Err(e) = &got {
            assert!(self.run.snapshot() == before, "a refused input ({e}) changed the tree");
        }
        got
    }

    fn poll(&mut self) {
        for _ in 0..256 {
            match self.run.poll_output() {
                Output::Send(req) => {
                    let style = if req.url.contains("/deep") {
                        Style::Gemini
                    } else if req.url.contains("/researcher") {
                        Style::Anthropic
                    } else if req.url.contains("/quick") {
                        Style::OpenAiResponses
                    } else {
                        Style::OpenAi
                    };
                    assert!(self.open.iter().all(|(x, _, _)| *x != req.exchange), "an exchange id given twice");
                    self.open.push((req.exchange, style, req.streaming));
                }
                Output::RunTools(batch) => self.running.extend(batch.calls.into_iter().map(|c| c.call_id)),
                Output::Suspended(requests) => {
                    assert!(!requests.is_empty(), "suspended on nothing");
                    for r in &requests {
                        let owner = self.run.request_owner(&r.id).unwrap_or_else(|| panic!("{} has no owner", r.id));
                        assert!(r.id.starts_with(&owner), "{} is owned by {owner}", r.id);
                    }
                }
                Output::Event(_) => {}
                Output::Wait { .. } | Output::Done(_) => return,
            }
        }
        panic!("poll_output did not settle in 256 outputs");
    }

    fn answer(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        let outstanding: Vec<String> = self.run.outstanding().into_iter().map(|r| r.id).collect();
        let pick = |u: &mut Unstructured<'_>, ids: &[String]| -> arbitrary::Result<Option<String>> {
            Ok(if ids.is_empty() { None } else { Some(ids[u.choose_index(ids.len())?].clone()) })
        };
        let base = pick(u, &outstanding)?.unwrap_or_else(|| "call_p1/toolu_r1/pnd_x".into());
        let id = match u.int_in_range(0..=7)? {
            0..=2 => base,
            3 => base.split_once('/').map_or(base.clone(), |(_, rest)| rest.to_string()),
            4 => format!("call_zz/{base}"),
            5 => format!("call_p2/{}", base.rsplit('/').next().unwrap_or_default()),
            6 => pick(u, &self.answered)?.unwrap_or(base),
            _ => u.arbitrary::<String>()?,
        };
        let ok: bool = u.arbitrary()?;
        let data = if u.ratio(1, 3)? {
            let mut m = Map::new();
            m.insert("output".into(), Value::String(u.arbitrary()?));
            Some(m)
        } else {
            None
        };
        let waiting = outstanding.contains(&id);
        let answer = Answer { id: id.clone(), ok, data, reason: None };
        match self.apply(Input::Answer(answer)) {
            Ok(()) => {
                assert!(waiting, "an answer to {id:?}, which nothing waits for, was taken");
                self.answered.push(id);
            }
            Err(e) => assert!(!waiting, "an answer to the outstanding {id:?} was refused: {e}"),
        }
        Ok(())
    }

    fn reply(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        let id = if !self.running.is_empty() && u.ratio(2, 3)? {
            self.running.remove(u.choose_index(self.running.len())?)
        } else {
            match u.int_in_range(0..=2)? {
                0 => "call_p1/toolu_r1/nope".to_string(),
                1 => "call_p2/call_q".to_string(),
                _ => u.arbitrary()?,
            }
        };
        let reply = if u.ratio(1, 3)? {
            ToolReply::Pending(Request::new("approval", "again?"))
        } else {
            ToolReply::Done(ToolResult::ok("done"))
        };
        let _ = self.apply(Input::ToolReply { call_id: id, reply });
        Ok(())
    }

    fn respond(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        if self.open.is_empty() {
            let stale = ExchangeId(u.int_in_range(0..=64)?);
            assert!(self.apply(Input::ResponseEnd { exchange: stale }).is_err(), "a response to nothing was taken");
            return Ok(());
        }
        let (exchange, style, stream) = self.open.remove(u.choose_index(self.open.len())?);
        let body = if u.ratio(1, 4)? {
            u.arbitrary::<Vec<u8>>()?
        } else {
            wire(style, &FakeTurn { text: Some("finished"), calls: Vec::new(), stop: None }, stream)
        };
        let ct = if stream { "text/event-stream" } else { "application/json" };
        let head = Input::ResponseHead { exchange, status: 200, headers: vec![("content-type".into(), ct.into())] };
        if self.apply(head).is_err() {
            return Ok(());
        }
        let split = u.choose_index(body.len().max(1))?;
        let (a, b) = body.split_at(split.min(body.len()));
        for chunk in [a, b] {
            let _ = self.apply(Input::ResponseBody { exchange, chunk });
        }
        let _ = self.apply(Input::ResponseEnd { exchange });
        Ok(())
    }

    fn restore(&mut self) {
        let bytes = self.run.snapshot();
        let Ok(run) = Run::restore(&bytes) else { panic!("a snapshot of the tree does not restore") };
        let once = run.snapshot();
        let Ok(again) = Run::restore(&once) else { panic!("a restored tree does not restore") };
        assert!(again.snapshot() == once, "restore is not idempotent");
        self.run = run;
        // A restored run sends again and puts running calls in doubt.
        self.open.clear();
        self.running.clear();
    }
}
