//! `nexus._native`: the Rust half of the `nexus` Python package.
//!
//! Everything crosses the boundary as JSON text (the state format, the wire
//! types' own serde forms), so the Python facade sees exactly the bytes the
//! Rust drivers and the `nexus` CLI see, and a state written by one is read
//! by the others unchanged. The facade (`python/nexus/`) adds the Python
//! idiom on top: dataclasses, type hints, `async def`, decorators.
#![forbid(unsafe_code)]

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

mod client;
mod errors;
mod proto;
mod store;
mod tools;

create_exception!(_native, NexusError, PyException, "Any error raised by nexus.");
create_exception!(_native, ProviderError, NexusError, "The provider refused or failed the run (after its retries).");
create_exception!(_native, LimitError, NexusError, "A deadline, a timeout or a body limit stopped the run.");
create_exception!(_native, StateError, NexusError, "A saved state could not be read, or an input did not fit the run.");
create_exception!(_native, ToolError, NexusError, "A tool declaration was refused, or a tool failed the run.");
create_exception!(_native, ConfigError, NexusError, "The client configuration is invalid.");
create_exception!(_native, StoreError, NexusError, "A run store refused or failed an operation.");
create_exception!(_native, RunCancelled, NexusError, "The run was cancelled.");
create_exception!(_native, ReplayError, NexusError, "A cassette did not replay as recorded.");
create_exception!(_native, OutputError, NexusError, "The run ended without a valid typed output.");
create_exception!(
    _native,
    OutputInvalidError,
    OutputError,
    "Every answer failed the output schema and the retries are spent."
);
create_exception!(_native, OutputRefusedError, OutputError, "The model refused to give the output.");
create_exception!(_native, OutputTruncatedError, OutputError, "The token limit cut the output off.");

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("NexusError", py.get_type::<NexusError>())?;
    m.add("ProviderError", py.get_type::<ProviderError>())?;
    m.add("LimitError", py.get_type::<LimitError>())?;
    m.add("StateError", py.get_type::<StateError>())?;
    m.add("ToolError", py.get_type::<ToolError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("RunCancelled", py.get_type::<RunCancelled>())?;
    m.add("ReplayError", py.get_type::<ReplayError>())?;
    m.add("OutputError", py.get_type::<OutputError>())?;
    m.add("OutputInvalidError", py.get_type::<OutputInvalidError>())?;
    m.add("OutputRefusedError", py.get_type::<OutputRefusedError>())?;
    m.add("OutputTruncatedError", py.get_type::<OutputTruncatedError>())?;
    m.add_class::<client::NativeSession>()?;
    m.add_class::<client::NativeClient>()?;
    m.add_class::<client::NativeStream>()?;
    m.add_class::<client::NativeCancel>()?;
    m.add_class::<store::NativeStore>()?;
    m.add_class::<proto::ProtoRun>()?;
    m.add_function(wrap_pyfunction!(client::replay, m)?)?;
    m.add("FORMAT_VERSION", nexus_proto::FORMAT_VERSION)?;
    Ok(())
}
