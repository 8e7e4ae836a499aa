//! How the examples pick their provider.
//!
//! Every example runs in three modes:
//!
//! * **any OpenAI-compatible server**, when `NEXUS_BASE_URL` is set: its base
//!   URL, which ends in `/v1` (`https://api.openai.com/v1`,
//!   `http://localhost:11434/v1` for Ollama, `http://localhost:8000/v1` for
//!   vLLM), with `NEXUS_MODEL` (required) and `NEXUS_API_KEY` (none sent
//!   when unset). `NEXUS_STYLE` picks another wire format for the server.
//! * **online**, when the API key variable of a provider is set
//!   (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY` or `GEMINI_API_KEY`; with several,
//!   `NEXUS_STYLE=anthropic|openai|gemini` chooses): the example talks to the
//!   real API. `NEXUS_MODEL` overrides the model.
//! * **offline** otherwise (or with `NEXUS_OFFLINE=1`): the example starts a
//!   scripted provider on loopback — a real HTTP server speaking the chosen
//!   wire format (OpenAI's unless `NEXUS_STYLE` says otherwise) — and plays
//!   the model's part from the script the example gives. Nothing leaves the
//!   machine, so the examples run in CI and their output can be checked.
//!
//! The drivers cannot tell the modes apart: only the base URL and the key
//! differ. A run resumed from a stored state goes where the resuming client
//! sends it: to the client's base URL when the client sets one and speaks
//! the run's wire format (as every client here does), else to the base URL
//! stored in the run (`ClientBuilder::base_url`).

// Each example uses the part it needs.
#![allow(dead_code)]

use nexus_drive::{ClientBuilder, ClientConfig, Style};
use nexus_tests::fake::{FakeProvider, Script, Scripts};

/// The model the scripted provider answers as.
pub const SCRIPTED_MODEL: &str = "scripted-model";

/// Where the example's model calls go.
pub struct Provider {
    /// The wire format.
    pub style: Style,
    /// The model id.
    pub model: String,
    /// A server named by `NEXUS_BASE_URL`: its base URL and key.
    server: Option<(String, Option<String>)>,
    /// The scripted provider, in offline mode (kept alive as long as this value).
    fake: Option<FakeProvider>,
}

impl Provider {
    /// The server `NEXUS_BASE_URL` names, else the real provider whose key
    /// is set, else a scripted one playing `script`.
    pub fn pick(script: Script) -> Provider {
        let forced = std::env::var("NEXUS_STYLE").ok().and_then(|s| Style::parse(&s));
        let offline = std::env::var_os("NEXUS_OFFLINE").is_some_and(|v| !v.is_empty() && v != "0");
        let set = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
        if let (Some(base_url), false) = (set("NEXUS_BASE_URL"), offline) {
            let style = forced.unwrap_or(Style::OpenAi);
            let model = set("NEXUS_MODEL").expect("NEXUS_BASE_URL needs NEXUS_MODEL: the model the server serves");
            if matches!(style, Style::OpenAi | Style::OpenAiResponses)
                && !base_url.trim_end_matches('/').ends_with("/v1")
            {
                eprintln!(
                    "# note: an OpenAI-compatible base URL usually ends in /v1 (requests go to BASE/chat/completions)"
                );
            }
            eprintln!("# server: {} {model} at {base_url}", style.name());
            return Provider { style, model, server: Some((base_url, set("NEXUS_API_KEY"))), fake: None };
        }
        let has_key = |s: Style| set(s.api_key_env()).is_some();
        let online = match forced {
            Some(style) => Some(style).filter(|s| has_key(*s)),
            None => [Style::Anthropic, Style::OpenAi, Style::Gemini].into_iter().find(|s| has_key(*s)),
        };
        match online.filter(|_| !offline) {
            Some(style) => {
                let model = set("NEXUS_MODEL").unwrap_or_else(|| default_model(style).to_string());
                eprintln!("# online: {} {model}", style.name());
                Provider { style, model, server: None, fake: None }
            }
            None => {
                let style = forced.unwrap_or(Style::OpenAi);
                let fake = FakeProvider::start(Scripts::default().model(SCRIPTED_MODEL, script));
                eprintln!("# offline: a scripted {} provider at {}", style.name(), fake.addr());
                Provider { style, model: SCRIPTED_MODEL.to_string(), server: None, fake: Some(fake) }
            }
        }
    }

    /// Whether the model is the scripted one.
    pub fn is_offline(&self) -> bool {
        self.fake.is_some()
    }

    /// A config builder for this provider (see [`configure`](Self::configure)).
    pub fn builder(&self) -> ClientBuilder {
        self.configure(ClientConfig::builder(self.style, &self.model))
    }

    /// Points `builder` at this provider. Online, the key is read from the
    /// style's variable by the builder itself; for a named server and
    /// offline, the base URL and the key are set here.
    pub fn configure<B: From<ClientConfig>>(&self, builder: ClientBuilder<B>) -> ClientBuilder<B> {
        match (&self.server, &self.fake) {
            (Some((url, Some(key))), _) => builder.base_url(url).api_key(key),
            (Some((url, None)), _) => builder.base_url(url).no_api_key(),
            (None, Some(fake)) => builder.base_url(fake.base_url(fake_style(self.style))).api_key(fake.api_key()),
            (None, None) => builder,
        }
    }
}

/// A small, cheap model of each provider.
fn default_model(style: Style) -> &'static str {
    match style {
        Style::Anthropic => "claude-haiku-4-5",
        Style::OpenAi => "gpt-4o-mini",
        Style::Gemini => "gemini-2.5-flash",
        Style::OpenAiResponses => "gpt-5-mini",
    }
}

/// The fake provider's name for a wire format.
pub fn fake_style(style: Style) -> nexus_tests::fake::Style {
    match style {
        Style::Anthropic => nexus_tests::fake::Style::Anthropic,
        Style::OpenAi => nexus_tests::fake::Style::OpenAi,
        Style::Gemini => nexus_tests::fake::Style::Gemini,
        Style::OpenAiResponses => nexus_tests::fake::Style::OpenAiResponses,
    }
}
