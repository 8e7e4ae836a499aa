//! What a run starts from: a prompt, a transcript, a suspended run's state
//! with answers, or a stored run with answers. Every one goes through the
//! same entry points, `run` and `stream`, in both drivers.

use std::sync::Arc;

use nexus_proto::{Answer, Message};

use crate::cancel::CancelToken;
use crate::config::ClientConfig;
use crate::engine::{self, Engine};
use crate::error::DriveError;
use crate::result::{RunResult, StreamItem};
use crate::store::{RunRecord, RunStore};

/// What a run starts from. A prompt converts into one (`client.run("Hi")`);
/// the other starts are named:
///
/// * [`RunInput::messages`]: a transcript whose last message is the user's;
/// * [`RunInput::resume`]: a suspended run's state and the answers to (some
///   of) its requests;
/// * [`RunInput::stored`]: a run kept in a [`RunStore`], claimed, resumed
///   with the answers and, at its end, written back (still pending) or
///   removed (finished), as `resume_stored` does.
pub struct RunInput(Start);

enum Start {
    Messages(Vec<Message>),
    Resume { state: Vec<u8>, answers: Vec<Answer> },
    Stored { store: Arc<dyn RunStore>, run_id: String, answers: Vec<Answer> },
}

impl RunInput {
    /// A new conversation from one prompt.
    pub fn prompt(prompt: impl Into<String>) -> RunInput {
        RunInput(Start::Messages(vec![Message::user(prompt)]))
    }

    /// A run over `messages`, the last of which must be a user turn.
    pub fn messages(messages: Vec<Message>) -> RunInput {
        RunInput(Start::Messages(messages))
    }

    /// A suspended run's snapshot, resumed with `answers`. An answer whose
    /// id matches no outstanding request is refused before anything is sent.
    pub fn resume(state: impl Into<Vec<u8>>, answers: Vec<Answer>) -> RunInput {
        RunInput(Start::Resume { state: state.into(), answers })
    }

    /// The run `run_id` of `store`, claimed and resumed with `answers`, and
    /// settled in the store when the run ends. A refusal before anything
    /// ran (a wrong answer, a tool this client lacks) releases the claim
    /// and leaves the stored run as it was. A stream dropped before its end
    /// keeps the claim: its tools may have run, and only the run's own end
    /// may say what the store holds next.
    pub fn stored(store: Arc<dyn RunStore>, run_id: impl Into<String>, answers: Vec<Answer>) -> RunInput {
        RunInput(Start::Stored { store, run_id: run_id.into(), answers })
    }
}

impl std::fmt::Debug for RunInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Start::Messages(m) => f.debug_struct("Messages").field("count", &m.len()).finish(),
            Start::Resume { answers, .. } => f.debug_struct("Resume").field("answers", answers).finish_non_exhaustive(),
            Start::Stored { run_id, answers, .. } => {
                f.debug_struct("Stored").field("run_id", run_id).field("answers", answers).finish_non_exhaustive()
            }
        }
    }
}

impl From<&str> for RunInput {
    fn from(prompt: &str) -> RunInput {
        RunInput::prompt(prompt)
    }
}

impl From<String> for RunInput {
    fn from(prompt: String) -> RunInput {
        RunInput::prompt(prompt)
    }
}

impl From<&String> for RunInput {
    fn from(prompt: &String) -> RunInput {
        RunInput::prompt(prompt.as_str())
    }
}

impl From<Vec<Message>> for RunInput {
    fn from(messages: Vec<Message>) -> RunInput {
        RunInput::messages(messages)
    }
}

/// A stored run claimed for this run, settled in its store at the end.
pub(crate) struct Claimed {
    store: Arc<dyn RunStore>,
    run_id: String,
    record: RunRecord,
}

impl Claimed {
    /// Writes the run back, removes it, or releases it (see `settle_stored`).
    pub(crate) fn settle(&self, result: Result<RunResult, DriveError>) -> Result<RunResult, DriveError> {
        engine::settle_stored(&*self.store, &self.run_id, &self.record, result)
    }

    /// Settles on the stream's last item; an event passes through.
    pub(crate) fn settle_item(
        claimed: &mut Option<Claimed>,
        item: Result<StreamItem, DriveError>,
    ) -> Result<StreamItem, DriveError> {
        let Some(c) = claimed.take() else { return item };
        match item {
            Ok(StreamItem::Event(e)) => {
                *claimed = Some(c);
                Ok(StreamItem::Event(e))
            }
            Ok(StreamItem::Done(result)) => c.settle(Ok(result)).map(StreamItem::Done),
            Err(e) => c.settle(Err(e)).map(StreamItem::Done),
        }
    }
}

/// The engine `input` starts, and the stored run it claimed, if any.
pub(crate) fn open(
    cfg: &Arc<ClientConfig>,
    cancel: &CancelToken,
    input: RunInput,
) -> (Result<Engine, DriveError>, Option<Claimed>) {
    match input.0 {
        Start::Messages(messages) => (Engine::start(cfg.clone(), cancel.clone(), messages), None),
        Start::Resume { state, answers } => (Engine::resume(cfg.clone(), cancel.clone(), &state, answers), None),
        Start::Stored { store, run_id, answers } => match store.claim(&run_id) {
            Err(e) => (Err(e.into()), None),
            Ok(record) => {
                let engine = Engine::resume(cfg.clone(), cancel.clone(), &record.state, answers);
                (engine, Some(Claimed { store, run_id, record }))
            }
        },
    }
}
