//! How the examples pick their provider.
//!
//! Every example runs in two modes:
//!
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
//! The drivers cannot tell the two apart: only the base URL and the key differ.

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
    /// The scripted provider, in offline mode (kept alive as long as this value).
    fake: Option<FakeProvider>,
}

impl Provider {
    /// The real provider when its key is set, else a scripted one playing `script`.
    pub fn pick(script: Script) -> Provider {
        Provider::pick_at(script, None)
    }

    /// Like [`pick`](Self::pick); offline, the scripted provider listens on the
    /// port of `url` when it names one. A run restored in a new process calls
    /// the base URL stored in its state, which offline is the loopback address
    /// of a scripted provider that ended with the process that stored it.
    pub fn pick_at(script: Script, url: Option<&str>) -> Provider {
        let forced = std::env::var("NEXUS_STYLE").ok().and_then(|s| Style::parse(&s));
        let offline = std::env::var_os("NEXUS_OFFLINE").is_some_and(|v| !v.is_empty() && v != "0");
        let has_key = |s: Style| std::env::var(s.api_key_env()).is_ok_and(|k| !k.is_empty());
        let online = match forced {
            Some(style) => Some(style).filter(|s| has_key(*s)),
            None => [Style::Anthropic, Style::OpenAi, Style::Gemini].into_iter().find(|s| has_key(*s)),
        };
        match online.filter(|_| !offline) {
            Some(style) => {
                let model = std::env::var("NEXUS_MODEL").unwrap_or_else(|_| default_model(style).to_string());
                eprintln!("# online: {} {model}", style.name());
                Provider { style, model, fake: None }
            }
            None => {
                let style = forced.unwrap_or(Style::OpenAi);
                let scripts = Scripts::default().model(SCRIPTED_MODEL, script);
                let fake = match url.and_then(loopback_port) {
                    Some(port) => FakeProvider::start_on(scripts, port)
                        .unwrap_or_else(|e| panic!("cannot listen on port {port}: {e}")),
                    None => FakeProvider::start(scripts),
                };
                eprintln!("# offline: a scripted {} provider at {}", style.name(), fake.addr());
                Provider { style, model: SCRIPTED_MODEL.to_string(), fake: Some(fake) }
            }
        }
    }

    /// Whether the model is the scripted one.
    pub fn is_offline(&self) -> bool {
        self.fake.is_some()
    }

    /// A client builder for this provider. Online, the key is read from the
    /// style's variable by the builder itself; offline, the base URL and the
    /// key point at the scripted provider.
    pub fn builder(&self) -> ClientBuilder {
        let builder = ClientConfig::builder(self.style, &self.model);
        match &self.fake {
            Some(fake) => builder.base_url(fake.base_url(fake_style(self.style))).api_key(fake.api_key()),
            None => builder,
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

/// The port of an `http://127.0.0.1:PORT/…` URL.
fn loopback_port(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("http://127.0.0.1:")?;
    let end = rest.find('/').unwrap_or(rest.len());
    rest.get(..end)?.parse().ok()
}
