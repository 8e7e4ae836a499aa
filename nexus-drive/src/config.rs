//! Client configuration: everything a driver needs to run, built once and
//! shared by every run of a client.
//!
//! What the machine needs goes into a [`RunConfig`] (serialized into
//! snapshots, so it never holds a secret); the API key and secret headers are
//! kept apart and handed to each run in memory only.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexus_proto::http::is_secret_header;
use nexus_proto::{
    Answer, BreakerPolicy, Breakers, ContextPolicy, FailoverPolicy, Request, RetryPolicy, RunConfig, StreamEvent,
    Style, Timestamp, TransportErrorKind, Upstream,
};
use serde_json::{Map, Value};

use crate::cancel::CancelToken;
use crate::cassette::Tap;
use crate::error::DriveError;
use crate::hooks::Hooks;
use crate::metrics::Metric;
use crate::store::ConversationStore;
use crate::tool::{AsyncTool, DynTool, Tool, Toolbox};
use crate::ApprovalPolicy;

/// A failed model exchange, as the host's classifier sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureInfo {
    /// The HTTP status, when the provider answered with an error status.
    pub status: Option<u16>,
    /// How the transport failed, when it did.
    pub transport: Option<TransportErrorKind>,
    /// 0 for the first attempt, then the retry number.
    pub attempt: u32,
    /// Whether the run would retry it (a retryable failure with retries left).
    pub will_retry: bool,
    /// The provider's error body, or the transport's message.
    pub message: String,
}

/// What the host's classifier decides about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Let the retry policy decide (retry when retryable and retries are left).
    Default,
    /// End the run now with this failure.
    FailNow,
}

pub(crate) type Classifier = dyn Fn(&FailureInfo) -> RetryDecision + Send + Sync;
pub(crate) type BodyTransform = dyn Fn(Vec<u8>) -> Vec<u8> + Send + Sync;
pub(crate) type AsyncAnswer = Pin<Box<dyn Future<Output = Answer> + Send + 'static>>;
type MetricFn = dyn Fn(&Metric) + Send + Sync;
type EventFn = dyn Fn(&StreamEvent) + Send + Sync;

/// How the host answers suspensions in-process.
#[derive(Clone)]
// Read by the drivers only; with none compiled in the fields are unused.
#[cfg_attr(not(any(feature = "blocking", feature = "async")), allow(dead_code))]
pub(crate) enum WaitFor {
    Blocking(Arc<dyn Fn(Request) -> Answer + Send + Sync>),
    Async(Arc<dyn Fn(Request) -> AsyncAnswer + Send + Sync>),
}

/// Model calls in flight at once across a run's tree when the host does
/// not say: enough for a turn that delegates to a few agents.
pub(crate) const DEFAULT_MODEL_CALLS: usize = 4;

/// A built client configuration. Create with [`ClientConfig::builder`].
#[derive(Clone)]
pub struct ClientConfig {
    pub(crate) run: RunConfig,
    pub(crate) api_key: Option<String>,
    pub(crate) secret_headers: Vec<(String, String)>,
    pub(crate) toolbox: Toolbox,
    pub(crate) hooks: Hooks,
    pub(crate) on_metric: Option<Arc<MetricFn>>,
    pub(crate) on_event: Option<Arc<EventFn>>,
    pub(crate) classifier: Option<Arc<Classifier>>,
    pub(crate) body_transform: Option<Arc<BodyTransform>>,
    pub(crate) wait_for: Option<WaitFor>,
    pub(crate) conversations: Option<Arc<dyn ConversationStore>>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) tool_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    /// Model calls a run and its sub-agents may have in flight at once
    /// ([`ClientBuilder::max_concurrent_model_calls`]).
    pub(crate) model_calls: usize,
    pub(crate) cancel: CancelToken,
    pub(crate) tap: Option<Arc<dyn Tap>>,
    /// Whether the host fixed the seed; otherwise every run draws its own,
    /// so run ids (and the idempotency keys built from them) never repeat.
    pub(crate) fixed_seed: bool,
    /// Whether the host set the base URL; a client that did sends the runs it
    /// resumes there too (runs of its own style), since a stored run may have
    /// been started against an endpoint that has moved since.
    pub(crate) base_url_set: bool,
    /// The skills runs may activate; their folders become readable once activated.
    #[cfg(feature = "skills")]
    pub(crate) skills: Option<Arc<crate::skills::Skills>>,
    /// Keys of upstreams other than the primary, by the upstream they open.
    pub(crate) upstream_keys: Vec<(Upstream, String)>,
    /// The sub-agents' tools and keys (their specs are in `run.agents`).
    pub(crate) agents: crate::agent::AgentTools,
    /// Each agent's key, by name (memory only, given to every run).
    pub(crate) agent_keys: Vec<(String, String)>,
    /// The circuits of every upstream this client's runs talk to, shared by them.
    pub(crate) breakers: Arc<Mutex<Breakers>>,
    /// Where runs record their spans and measurements (SPEC §22).
    #[cfg(feature = "otel")]
    pub(crate) telemetry: Option<crate::telemetry::Telemetry>,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret_names: Vec<&str> = self.secret_headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ClientConfig")
            .field("run", &self.run)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("secret_headers", &secret_names)
            .field("toolbox", &self.toolbox)
            .field("hooks", &self.hooks)
            .field("wait_for", &self.wait_for.is_some())
            .field("tap", &self.tap.is_some())
            .field("timeout", &self.timeout)
            .field("tool_timeout", &self.tool_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// A builder for `style` and `model` with the defaults of [`RunConfig::new`].
    pub fn builder(style: Style, model: impl Into<String>) -> ClientBuilder {
        ClientBuilder::from_run_config(RunConfig::new(style, model))
    }

    /// The wire format.
    pub fn style(&self) -> Style {
        self.run.style
    }

    /// The model id.
    pub fn model(&self) -> &str {
        &self.run.model
    }

    /// The machine's config every run starts from.
    pub fn run_config(&self) -> &RunConfig {
        &self.run
    }

    /// The tools.
    pub fn toolbox(&self) -> &Toolbox {
        &self.toolbox
    }

    /// Whether an API key is set (the key itself is never shown).
    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// The cancel token runs of this config use unless given another.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// The circuit breakers this client's runs share.
    pub fn breakers(&self) -> Breakers {
        self.breakers.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The key for upstream `u` (not the primary): the one given for it
    /// (same style, base URL and model, else same style and model), else
    /// the primary's key when the style is the primary's, else the style's
    /// environment variable (`OPENAI_API_KEY`, …) when set.
    pub(crate) fn key_for(&self, u: &Upstream) -> Option<String> {
        let given = self
            .upstream_keys
            .iter()
            .find(|(k, _)| k == u)
            .or_else(|| self.upstream_keys.iter().find(|(k, _)| k.style == u.style && k.model == u.model));
        if let Some((_, key)) = given {
            return Some(key.clone());
        }
        if u.style == self.run.style {
            return self.api_key.clone();
        }
        std::env::var(u.style.api_key_env()).ok().filter(|k| !k.is_empty())
    }
}

enum KeySource {
    Default,
    Explicit(String),
    Env(String),
    None,
}

/// Builds a client: [`Client::builder`](crate::Client::builder) and
/// [`AsyncClient::builder`](crate::AsyncClient::builder) build the client
/// itself, [`ClientConfig::builder`] a config to share between clients.
/// Errors (a bad tool, a missing key variable) are reported by
/// [`build`](Self::build), whatever order the settings came in.
pub struct ClientBuilder<Built = ClientConfig> {
    cfg: ClientConfig,
    key: KeySource,
    fallback_keys: Vec<(Upstream, KeySource)>,
    breaker: BreakerPolicy,
    approvals: Vec<(String, ApprovalPolicy)>,
    error: Option<DriveError>,
    /// What [`build`](Self::build) makes of the config.
    target: PhantomData<fn() -> Built>,
}

impl ClientBuilder {
    /// A builder starting from a machine config.
    pub fn from_run_config(run: RunConfig) -> ClientBuilder {
        ClientBuilder {
            cfg: ClientConfig {
                run,
                api_key: None,
                secret_headers: Vec::new(),
                toolbox: Toolbox::new(),
                hooks: Hooks::new(),
                on_metric: None,
                on_event: None,
                classifier: None,
                body_transform: None,
                wait_for: None,
                conversations: None,
                timeout: None,
                tool_timeout: None,
                connect_timeout: Duration::from_secs(30),
                model_calls: DEFAULT_MODEL_CALLS,
                cancel: CancelToken::new(),
                tap: None,
                fixed_seed: false,
                base_url_set: false,
                #[cfg(feature = "skills")]
                skills: None,
                upstream_keys: Vec::new(),
                breakers: Arc::default(),
                agents: crate::agent::AgentTools::default(),
                agent_keys: Vec::new(),
                #[cfg(feature = "otel")]
                telemetry: None,
            },
            key: KeySource::Default,
            fallback_keys: Vec::new(),
            breaker: BreakerPolicy::default(),
            approvals: Vec::new(),
            error: None,
            target: PhantomData,
        }
    }

    /// The same settings, building a `U` (a client) instead.
    #[cfg(any(feature = "blocking", feature = "async"))]
    pub(crate) fn building<U: From<ClientConfig>>(self) -> ClientBuilder<U> {
        let ClientBuilder { cfg, key, fallback_keys, breaker, approvals, error, target: _ } = self;
        ClientBuilder { cfg, key, fallback_keys, breaker, approvals, error, target: PhantomData }
    }
}

impl<Built: From<ClientConfig>> ClientBuilder<Built> {
    /// The run must end in a value that validates against `spec`'s schema
    /// (see [`OutputSpec`](nexus_proto::OutputSpec)); it is
    /// [`RunResult::output`](crate::RunResult::output) then.
    pub fn output(mut self, spec: nexus_proto::OutputSpec) -> Self {
        self.cfg.run.output = Some(spec);
        self
    }

    /// [`output`](Self::output) with the schema derived from `T`; read the
    /// value back with [`RunResult::output_as`](crate::RunResult::output_as).
    #[cfg(feature = "schemars")]
    pub fn output_type<T: schemars::JsonSchema>(self, mode: nexus_proto::OutputMode) -> Self {
        self.output(nexus_proto::OutputSpec::new(crate::tool::schema_for::<T>()).with_mode(mode))
    }

    /// An upstream tried, in the order given, after the primary when a call
    /// fails for the upstream's fault (see [`FailoverPolicy`]). Its key is the
    /// primary's when it speaks the primary's style, else the style's
    /// environment variable; [`fallback_key`](Self::fallback_key) and
    /// [`fallback_key_env`](Self::fallback_key_env) give another.
    pub fn fallback(mut self, upstream: Upstream) -> Self {
        self.cfg.run.fallbacks.push(upstream);
        self
    }

    /// An upstream with its own key (memory only, never in a snapshot). Also
    /// used for runs this client resumes that list the same upstream.
    pub fn fallback_key(mut self, upstream: Upstream, key: impl Into<String>) -> Self {
        self.fallback_keys.push((upstream.clone(), KeySource::Explicit(key.into())));
        self.fallback(upstream)
    }

    /// An upstream whose key is read from `var` (which must be set).
    pub fn fallback_key_env(mut self, upstream: Upstream, var: impl Into<String>) -> Self {
        self.fallback_keys.push((upstream.clone(), KeySource::Env(var.into())));
        self.fallback(upstream)
    }

    /// A key for an upstream that resumed runs list, without adding it to
    /// this client's own fallbacks.
    pub fn upstream_key(mut self, upstream: Upstream, key: impl Into<String>) -> Self {
        self.fallback_keys.push((upstream, KeySource::Explicit(key.into())));
        self
    }

    /// When a failed call moves on to the next upstream.
    pub fn failover_policy(mut self, policy: FailoverPolicy) -> Self {
        self.cfg.run.failover = policy;
        self
    }

    /// When an upstream's circuit opens and how long it stays open. The
    /// breakers belong to the client: every run it drives shares them.
    pub fn breaker_policy(mut self, policy: BreakerPolicy) -> Self {
        self.breaker = policy;
        self
    }

    fn fail(&mut self, e: DriveError) {
        self.error.get_or_insert(e);
    }

    /// The API base URL (default: the provider's public one). Runs this
    /// client resumes from a stored state are sent here too when they are of
    /// the client's style: where a run executes is the host's to decide.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.cfg.run.base_url = url.into();
        self.cfg.base_url_set = true;
        self
    }

    /// The API key. Without one, the key is read from the style's variable
    /// (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `GEMINI_API_KEY`) when set.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.key = KeySource::Explicit(key.into());
        self
    }

    /// Reads the API key from this environment variable (which must be set).
    pub fn api_key_env(mut self, var: impl Into<String>) -> Self {
        self.key = KeySource::Env(var.into());
        self
    }

    /// Sends no API key at all (local servers).
    pub fn no_api_key(mut self) -> Self {
        self.key = KeySource::None;
        self
    }

    /// An extra header. Secret-named ones (`authorization`, `x-api-key`, …)
    /// are kept in memory only, never in a snapshot.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let (name, value) = (name.into(), value.into());
        if is_secret_header(&name) {
            self.cfg.secret_headers.push((name, value));
        } else {
            self.cfg.run.headers.push((name, value));
        }
        self
    }

    /// The system prompt.
    pub fn system(mut self, prompt: impl Into<String>) -> Self {
        self.cfg.run.system = Some(prompt.into());
        self
    }

    /// The cap on model calls per run (default 10).
    pub fn max_turns(mut self, n: u32) -> Self {
        self.cfg.run.max_turns = n;
        self
    }

    /// The output token cap per call.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.cfg.run.max_tokens = Some(n);
        self
    }

    /// The context window of the primary upstream in tokens, over the
    /// built-in table (turns the context budget on).
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.context().windows.insert(0, tokens);
        self
    }

    /// The context window of upstream `index` (0 the primary, then the
    /// fallbacks in order) in tokens, over the built-in table (turns the
    /// context budget on).
    pub fn context_window_of(mut self, index: usize, tokens: u64) -> Self {
        self.context().windows.insert(index, tokens);
        self
    }

    /// Compact when the next request's estimate passes this fraction of the
    /// window (default 0.8; turns the context budget on). The low-water mark
    /// follows it down when it is lower.
    pub fn compact_at(mut self, fraction: f64) -> Self {
        let policy = self.context();
        policy.compact_at = fraction;
        policy.low_water = policy.low_water.min(fraction);
        self
    }

    /// Cap on a tool result in the requests, in bytes: longer results keep
    /// their head and tail with a marker (the run keeps them whole). Turns
    /// the context budget on.
    pub fn max_tool_result_bytes(mut self, n: usize) -> Self {
        self.context().max_tool_result_bytes = Some(n);
        self
    }

    /// Cap on results of tool `name`, over [`max_tool_result_bytes`](Self::max_tool_result_bytes).
    pub fn tool_result_cap(mut self, name: impl Into<String>, n: usize) -> Self {
        self.context().tool_result_caps.insert(name.into(), n);
        self
    }

    /// Ask OpenAI Responses upstreams to compact server-side past
    /// `compact_threshold` input tokens (`context_management`); the opaque
    /// item they answer with is kept and sent back to them, and left out
    /// for any other style. Turns the context budget on.
    pub fn responses_compaction(mut self, compact_threshold: u64) -> Self {
        self.context().responses_compaction = Some(nexus_proto::ResponsesCompaction { compact_threshold });
        self
    }

    /// Ask the upstream's token counter (Anthropic, OpenAI Responses,
    /// Gemini) for a request whose estimate is within `fraction` of the
    /// compaction trigger, and go by its count. Turns the context budget on.
    pub fn count_margin(mut self, fraction: f64) -> Self {
        self.context().count_margin = Some(fraction);
        self
    }

    /// The whole context budget at once (see [`ContextPolicy`]).
    pub fn context_policy(mut self, policy: ContextPolicy) -> Self {
        self.cfg.run.context = Some(policy);
        self
    }

    fn context(&mut self) -> &mut ContextPolicy {
        self.cfg.run.context.get_or_insert_with(ContextPolicy::default)
    }

    /// Ask for SSE streams (read and fed incrementally).
    pub fn stream(mut self, on: bool) -> Self {
        self.cfg.run.stream = on;
        self
    }

    /// Retries after the first attempt (`0` means none; default 2).
    pub fn retries(mut self, n: u32) -> Self {
        self.cfg.run.retry.retries = n;
        self
    }

    /// The backoff base (default 500 ms).
    pub fn retry_base_delay(mut self, d: Duration) -> Self {
        self.cfg.run.retry.base_delay_ms = duration_ms(d);
        self
    }

    /// The whole retry policy.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.cfg.run.retry = policy;
        self
    }

    /// Seeds retry jitter and run ids (reproducible runs).
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.run.seed = seed;
        self.cfg.fixed_seed = true;
        self
    }

    /// Each run must end within `d` of its start (else it fails with `DeadlineExceeded`).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.cfg.timeout = Some(d);
        self
    }

    /// Every run must end by this wall-clock time.
    pub fn deadline(mut self, at: Timestamp) -> Self {
        self.cfg.run.deadline = Some(at);
        self
    }

    /// An extra body key (the caller's value wins over ours; `messages`,
    /// `tools`, `stream` and the other conversation keys are refused).
    pub fn param(mut self, key: impl Into<String>, value: Value) -> Self {
        self.cfg.run.params.insert(key.into(), value);
        self
    }

    /// Extra body keys (see [`param`](Self::param)).
    pub fn params(mut self, params: Map<String, Value>) -> Self {
        self.cfg.run.params.extend(params);
        self
    }

    /// The response body limit in bytes.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.cfg.run.max_body_bytes = n;
        self
    }

    /// An escape hatch applied to the body bytes of every model request before it is sent.
    pub fn body_transform(mut self, f: impl Fn(Vec<u8>) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.cfg.body_transform = Some(Arc::new(f));
        self
    }

    /// Classifies failed model exchanges; may end the run at once instead of
    /// retrying. Retries stay bounded by the retry policy.
    pub fn classify_errors(mut self, f: impl Fn(&FailureInfo) -> RetryDecision + Send + Sync + 'static) -> Self {
        self.cfg.classifier = Some(Arc::new(f));
        self
    }

    /// The cancel token runs use by default.
    pub fn cancel_token(mut self, token: CancelToken) -> Self {
        self.cfg.cancel = token;
        self
    }

    /// A typed blocking tool.
    pub fn tool<T: Tool>(mut self, tool: T) -> Self {
        if let Err(e) = self.cfg.toolbox.add(tool) {
            self.fail(e.into());
        }
        self
    }

    /// A typed async tool.
    pub fn async_tool<T: AsyncTool>(mut self, tool: T) -> Self {
        if let Err(e) = self.cfg.toolbox.add_async(tool) {
            self.fail(e.into());
        }
        self
    }

    /// A dynamic tool.
    pub fn dyn_tool(mut self, tool: DynTool) -> Self {
        if let Err(e) = self.cfg.toolbox.add_dyn(tool) {
            self.fail(e.into());
        }
        self
    }

    /// A declaration-only (relay) tool.
    pub fn relay_tool(mut self, name: &str, description: impl Into<String>, input_schema: Value) -> Self {
        if let Err(e) = self.cfg.toolbox.add_relay(name, description, input_schema) {
            self.fail(e.into());
        }
        self
    }

    /// A sub-agent: a tool of every run whose execution is a child run
    /// (SPEC §17). Its tool calls are served from its own tools.
    pub fn agent(mut self, agent: crate::agent::AgentTool) -> Self {
        if let Some(e) = agent.error() {
            self.fail(e.into());
        }
        self.cfg.agents.0.push(agent);
        self
    }

    /// Adds every tool of `toolbox` (with their timeouts and approval
    /// policies) to those given so far.
    pub fn toolbox(mut self, toolbox: Toolbox) -> Self {
        if let Err(e) = self.cfg.toolbox.extend(toolbox) {
            self.fail(e.into());
        }
        self
    }

    /// Asks a person before the calls of tool `name` that `policy` applies
    /// to run: `true` (every call) or [`ApprovalPolicy::when`] a predicate on
    /// the arguments. Any executed tool, whenever it is added: built-ins,
    /// MCP servers' (`server__tool`), typed, dynamic. The call suspends on
    /// an `approval` request ([`wait_for`](Self::wait_for) answers it
    /// in-process; without it the run ends pending, durable like any other).
    pub fn needs_approval(mut self, name: impl Into<String>, policy: impl Into<ApprovalPolicy>) -> Self {
        self.approvals.push((name.into(), policy.into()));
        self
    }

    /// Gives up on any tool call after `d` (error result) unless the tool has its own timeout.
    pub fn tool_timeout(mut self, d: Duration) -> Self {
        self.cfg.tool_timeout = Some(d);
        self
    }

    /// The TCP connect timeout (default 30 s). Response bodies have no
    /// overall timeout: streams may run long; use [`timeout`](Self::timeout).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.cfg.connect_timeout = d;
        self
    }

    /// How many model calls a run and its sub-agents may have in flight at
    /// once (default 4; at least 1). Agent calls of one turn start their
    /// children together, and each child's model call goes out as soon as
    /// a slot is free, on a connection of its own; 1 has the children take
    /// turns. A run's own call is always alone: its children live only
    /// while it runs tools.
    pub fn max_concurrent_model_calls(mut self, n: usize) -> Self {
        self.cfg.model_calls = n.max(1);
        self
    }

    /// The hooks.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.cfg.hooks = hooks;
        self
    }

    /// Receives every metric event.
    pub fn on_metric(mut self, f: impl Fn(&Metric) + Send + Sync + 'static) -> Self {
        self.cfg.on_metric = Some(Arc::new(f));
        self
    }

    /// Receives every stream event of non-streaming calls (`run`, `resume`, `ask`).
    pub fn on_event(mut self, f: impl Fn(&StreamEvent) + Send + Sync + 'static) -> Self {
        self.cfg.on_event = Some(Arc::new(f));
        self
    }

    /// Answers suspensions in-process: called once per outstanding request,
    /// concurrently for the requests of one turn. Without it a suspended run
    /// returns `pending` with its snapshot.
    pub fn wait_for(mut self, f: impl Fn(Request) -> Answer + Send + Sync + 'static) -> Self {
        self.cfg.wait_for = Some(WaitFor::Blocking(Arc::new(f)));
        self
    }

    /// Like [`wait_for`](Self::wait_for), with an async answerer.
    pub fn wait_for_async<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Answer> + Send + 'static,
    {
        self.cfg.wait_for = Some(WaitFor::Async(Arc::new(move |r| Box::pin(f(r)))));
        self
    }

    /// The store `ask` keeps conversations in.
    pub fn conversation_store(mut self, store: Arc<dyn ConversationStore>) -> Self {
        self.cfg.conversations = Some(store);
        self
    }

    /// Records the session: the tap sees every input the machine accepts (with
    /// its time) and every output it produces; a
    /// [`Recorder`](crate::cassette::Recorder) writes them as a cassette.
    pub fn tap(mut self, tap: Arc<dyn Tap>) -> Self {
        self.cfg.tap = Some(tap);
        self
    }

    /// Runs record `invoke_agent`, `chat` and `execute_tool` spans (and,
    /// with a meter, the GenAI metrics) into `telemetry` (SPEC §22).
    #[cfg(feature = "otel")]
    pub fn telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        self.cfg.telemetry = Some(telemetry);
        self
    }

    /// Agent Skills (see [`skills`](crate::skills)): at [`build`](Self::build)
    /// their catalog is appended to the system prompt and the `skill` tool is
    /// added; a run that activates a skill may `read` its folder. An empty
    /// set adds nothing. A resumed run keeps the system prompt it started
    /// with; give it the same skills so its `skill` calls and reads still work.
    #[cfg(feature = "skills")]
    pub fn skills(mut self, skills: crate::skills::Skills) -> Self {
        self.cfg.skills = Some(Arc::new(skills));
        self
    }

    /// Checks the settings and builds the client (or, from
    /// [`ClientConfig::builder`], the config).
    pub fn build(self) -> Result<Built, DriveError> {
        self.build_config().map(Built::from)
    }

    fn build_config(self) -> Result<ClientConfig, DriveError> {
        let ClientBuilder { mut cfg, key, fallback_keys, breaker, approvals, error, target: _ } = self;
        if let Some(e) = error {
            return Err(e);
        }

        #[cfg(feature = "skills")]
        if let Some(skills) = cfg.skills.clone().filter(|s| !s.is_empty()) {
            let bound = |name: &str| cfg.toolbox.get(name).is_some_and(|e| e.handler.is_some());
            let tool = skills.tool(bound("read"), bound("bash"));
            cfg.toolbox.add_dyn(tool)?;
            let catalog = skills.catalog().text;
            cfg.run.system = Some(match cfg.run.system.take() {
                Some(prompt) if !prompt.trim().is_empty() => format!("{prompt}\n\n{catalog}"),
                _ => catalog,
            });
        }
        // After the skills' tool is added: any tool may need approval.
        for (name, policy) in approvals {
            cfg.toolbox.needs_approval(&name, policy)?;
        }
        for (upstream, source) in fallback_keys {
            let key = match source {
                KeySource::Explicit(k) => k,
                KeySource::Env(var) => match std::env::var(&var) {
                    Ok(k) if !k.is_empty() => k,
                    _ => return Err(DriveError::Config(format!("the API key variable {var} is not set"))),
                },
                KeySource::Default | KeySource::None => continue,
            };
            cfg.upstream_keys.push((upstream, key));
        }
        cfg.breakers = Arc::new(Mutex::new(Breakers::new(breaker)));
        cfg.run.validate()?;
        cfg.api_key = match key {
            KeySource::Explicit(k) => Some(k),
            KeySource::Env(var) => match std::env::var(&var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => return Err(DriveError::Config(format!("the API key variable {var} is not set"))),
            },
            KeySource::Default => std::env::var(cfg.run.style.api_key_env()).ok().filter(|k| !k.is_empty()),
            KeySource::None => None,
        };
        if !cfg.agents.0.is_empty() {
            // Specs are made now, so a base URL set after `agent` still reaches the children that share it.
            let mut run = cfg.run.clone();
            run.agents.get_or_insert_with(Default::default).agents.clear();
            for agent in &cfg.agents.0 {
                let spec = agent.spec(&cfg.run);
                run = run.with_agent(spec);
            }
            run.validate()?;
            cfg.run = run;
            cfg.agent_keys = cfg.agents.keys(&|u| cfg.key_for(u));
        }
        Ok(cfg)
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_the_run_config_and_debug() {
        let cfg = ClientConfig::builder(Style::OpenAi, "m")
            .api_key("sk-very-secret")
            .header("Authorization", "Bearer other-secret")
            .header("x-trace", "1")
            .build()
            .unwrap();
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("sk-very-secret") && !dbg.contains("other-secret"), "{dbg}");
        assert_eq!(cfg.run.headers, vec![("x-trace".to_string(), "1".to_string())]);
        assert!(cfg.has_api_key());
    }

    #[test]
    fn reserved_params_and_missing_key_variables_are_refused() {
        let err = ClientConfig::builder(Style::OpenAi, "m").param("messages", Value::Null).build().unwrap_err();
        assert!(matches!(err, DriveError::Input(_)), "{err:?}");
        let err =
            ClientConfig::builder(Style::OpenAi, "m").api_key_env("NEXUS_TEST_SURELY_UNSET_VAR").build().unwrap_err();
        assert!(err.to_string().contains("NEXUS_TEST_SURELY_UNSET_VAR"));
    }
}
