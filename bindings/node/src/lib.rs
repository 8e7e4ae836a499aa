//! nexus for Node.js: the native half of the `nexus-loop` package.
//!
//! Two surfaces, both speaking JSON text across the boundary:
//!
//! * `client::Client` runs the blocking driver of `nexus-drive` on a
//!   thread per call. JavaScript tools, `waitFor` and stream events are
//!   messages queued onto Node's thread (`bridge`); Node's event loop never
//!   waits for Rust, and Rust waits for JavaScript only on its own threads.
//! * `machine::Machine` is `nexus-proto`'s `Run` itself, for hosts that
//!   do their own I/O (`handleInput` / `pollOutput` / `snapshot` / `restore`).
//!
//! The JavaScript facade (`index.js`, `index.d.ts`) gives both Node's idiom.
#![deny(missing_docs)]

mod bridge;
mod client;
mod machine;
mod store;

pub use bridge::reply;
