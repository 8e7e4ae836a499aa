//! `nexus resume --login-again`: a kept run whose MCP login expired (SPEC
//! §20.3) gets a new one. The servers are asked again, the new requests take
//! the place of the old in the run's state, and the run is kept again —
//! still suspended, its root kept with it — for `nexus resume --answer
//! ID=REDIRECT_URL` to complete as any login.

use std::fs;

use nexus_drive::workdir::{self, Workdir};
use nexus_proto::Request;
use serde_json::json;

use crate::run::{machine_state, release_after, resume_root, write_atomic, ResumeArgs, DEFAULT_STATE};
use crate::store::Store;
use crate::{mcp, mcp_auth, out, Fail};

/// Runs `nexus resume --login-again` on the state file, or on the run `id`
/// in the store `spec`. Exit 3: the run waits on the new logins.
pub fn login_again(p: &ResumeArgs, from_store: Option<(&String, &String)>) -> Result<i32, Fail> {
    let servers = mcp::configs(&p.mcp)?;
    if servers.is_empty() {
        return Err(Fail::usage("--login-again needs the run's --mcp FILE(s): its servers are asked for a new login"));
    }
    // The new state, with the run's root kept with it as a resume keeps it.
    let renew = |kept: &[u8], source: &str| -> Result<(Vec<u8>, Vec<Request>), Fail> {
        let root = resume_root(p, kept, source)?;
        let (state, requests) = mcp_auth::restart(&servers, &machine_state(kept, source)?)?;
        if requests.is_empty() {
            return Err(Fail::usage(format!(
                "{source}: its MCP servers need no login any more (a token is stored); nothing was changed: \
                 start a new run to use them"
            )));
        }
        let state = workdir::attach(&state, &Workdir::new(&root))
            .map_err(|e| Fail::runtime(format!("cannot keep the run's root with it: {e}")))?;
        Ok((state, requests))
    };
    let (requests, resume_with) = match from_store {
        None => {
            let path = p.state.as_deref().unwrap_or(DEFAULT_STATE);
            let source = format!("state file {path}");
            let kept = fs::read(path).map_err(|e| Fail::runtime(format!("cannot read {source}: {e}")))?;
            let (state, requests) = renew(&kept, &source)?;
            write_atomic(path.as_ref(), &state).map_err(|e| Fail::runtime(format!("cannot write {source}: {e}")))?;
            (requests, format!("--state {path}"))
        }
        Some((spec, id)) => {
            let store = Store::open(spec, false)?;
            // Held only while the servers are asked: a lease covers it.
            let held = store.claim(id, p.lease.saturating_mul(1000))?;
            match renew(&held.state, &format!("run {id} in {spec}")) {
                Ok((state, requests)) => {
                    store.suspend(&held, &state)?;
                    (requests, format!("--store {spec} --run {id}"))
                }
                Err(fail) => return Err(release_after(&store, &held, fail, false)),
            }
        }
    };
    if p.json {
        let mut result = json!({"status": "pending", "pending": requests});
        if let (Some((_, id)), Some(obj)) = (from_store, result.as_object_mut()) {
            obj.insert("runId".into(), id.as_str().into());
        }
        out(&result.to_string());
    } else {
        out(&serde_json::to_string_pretty(&requests).unwrap_or_default());
    }
    let ids: Vec<&str> = requests.iter().map(|r| r.id.as_str()).collect();
    eprintln!(
        "nexus: the run waits on {} new login(s) ({}). Open the URL, then continue with: nexus resume {resume_with} \
         --mcp FILE --answer ID=REDIRECT_URL",
        requests.len(),
        ids.join(", ")
    );
    Ok(3)
}
