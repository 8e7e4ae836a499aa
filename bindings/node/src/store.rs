//! The `store` option: where suspended runs are kept under their run id.
//! The same locations as `nexus run --store` (`sqlite:PATH`, `dir:PATH` or
//! a directory path), so a run one of them suspends the other resumes;
//! plus `memory`, for resuming in the same process.

use std::sync::Arc;

use nexus_drive::stores::sqlite::SqliteStore;
use nexus_drive::{FileRunStore, MemoryRunStore, RunStore, StoreError};

/// Opens the store `spec` names.
pub fn open(spec: &str) -> Result<Arc<dyn RunStore>, StoreError> {
    if spec == "memory" {
        return Ok(Arc::new(MemoryRunStore::new()));
    }
    if let Some(path) = spec.strip_prefix("sqlite:") {
        return Ok(Arc::new(SqliteStore::open(path)?));
    }
    let dir = spec.strip_prefix("dir:").unwrap_or(spec);
    Ok(Arc::new(FileRunStore::open(dir)?))
}
