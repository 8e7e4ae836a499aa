//! `store=`: where suspended runs are kept under their run id, shared by
//! every run of one Python client. The same locations as the CLI's
//! `--store`: `sqlite:PATH`, `dir:PATH` or a directory path, plus `memory`
//! (this process only).

use std::path::PathBuf;
use std::sync::Arc;

use nexus_drive::stores::sqlite::SqliteStore;
use nexus_drive::{FileRunStore, MemoryRunStore, RunStore};
use pyo3::prelude::*;

use crate::errors;

/// An open run store.
#[pyclass(frozen, module = "nexus._native")]
pub struct NativeStore {
    pub(crate) store: Arc<dyn RunStore>,
}

#[pymethods]
impl NativeStore {
    #[new]
    fn new(spec: &str) -> PyResult<NativeStore> {
        let store: Arc<dyn RunStore> = match spec.split_once(':') {
            _ if spec == "memory" => Arc::new(MemoryRunStore::new()),
            Some(("sqlite", path)) if !path.is_empty() => Arc::new(SqliteStore::open(path).map_err(errors::store)?),
            Some(("dir", path)) if !path.is_empty() => {
                Arc::new(FileRunStore::open(PathBuf::from(path)).map_err(errors::store)?)
            }
            Some((scheme, _))
                if scheme.len() >= 2 && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)) =>
            {
                return Err(errors::config(
                    &format!("store {spec:?}"),
                    "use \"memory\", \"sqlite:PATH\", \"dir:PATH\" or a directory path",
                ))
            }
            _ if spec.is_empty() => return Err(errors::config("store", "empty location")),
            _ => Arc::new(FileRunStore::open(PathBuf::from(spec)).map_err(errors::store)?),
        };
        Ok(NativeStore { store })
    }
}
