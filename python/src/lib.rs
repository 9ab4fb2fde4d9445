//! `mission._native`: the Rust SDK (`mission-client`) as a Python extension module. The Python
//! package `mission` wraps it: results cross as JSON and become Python objects there, errors
//! become the package's exceptions here.
//!
//! Layout: this file holds what every call shares (the runtime, [`block_on`], errors, JSON);
//! `client` the signed-in client, `auth` sign-in, `transfer` progress of uploads and
//! downloads, `follow` the log-follow iterator.
//!
//! Every call runs with the GIL released on one current-thread Tokio runtime, driven by the
//! calling thread itself: handing the I/O to worker threads cost a quarter of a loopback round
//! trip in wake-ups (`cargo bench -p mission-cli --bench python_sdk`). Calls from several Python
//! threads share it: whichever thread is in a call drives the I/O of all of them. A call wakes
//! every 50 ms to let Python handle signals, so Ctrl-C interrupts a long call promptly.

mod auth;
mod client;
mod follow;
mod transfer;

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use mission_client::{Error, Uuid};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(mission, MissionError, PyException, "Any error of the Mission Compute SDK.");
create_exception!(mission, NotFound, MissionError, "The resource does not exist, or is not visible to you (404).");
create_exception!(mission, Unauthorized, MissionError, "Not signed in, or the session ended (401).");
create_exception!(mission, Forbidden, MissionError, "You may see the resource but not do this (403).");
create_exception!(mission, Invalid, MissionError, "The request is not valid (400); its detail says why.");
create_exception!(mission, Conflict, MissionError, "The request clashes with the resource's state (409).");
create_exception!(mission, ServerError, MissionError, "The service failed (5xx).");
create_exception!(mission, TransportError, MissionError, "The service could not be reached, or answered nonsense.");
create_exception!(
    mission,
    SignInError,
    Unauthorized,
    "Signing in failed: denied, expired, or refused by the provider."
);

/// How often a waiting call lets Python look at its signals (and report progress).
const TICK: Duration = Duration::from_millis(50);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("mission-sdk")
            .build()
            .expect("a Tokio runtime")
    })
}

/// The SDK's error as the package's exception: its message the problem's detail, which it also
/// carries as `detail`, with the HTTP `status` (`None` when the service did not answer).
fn to_py(error: Error) -> PyErr {
    let detail = error.problem().map(|p| p.detail.clone()).unwrap_or_else(|| error.to_string());
    let status = error.status();
    let raised = match error {
        Error::NotFound(_) => NotFound::new_err(detail.clone()),
        Error::Unauthorized(_) | Error::NotSignedIn(_) => Unauthorized::new_err(detail.clone()),
        Error::SignIn(_) => SignInError::new_err(detail.clone()),
        Error::Forbidden(_) => Forbidden::new_err(detail.clone()),
        Error::Api(p) if p.status == 400 || p.status == 413 || p.status == 422 => Invalid::new_err(detail.clone()),
        Error::Api(p) if p.status == 409 => Conflict::new_err(detail.clone()),
        Error::Api(p) if p.status >= 500 => ServerError::new_err(detail.clone()),
        Error::Http(_) | Error::Protocol(_) => TransportError::new_err(detail.clone()),
        Error::InvalidPath(_) | Error::InvalidUrl(_) => Invalid::new_err(detail.clone()),
        _ => MissionError::new_err(detail.clone()),
    };
    Python::attach(|py| {
        let value = raised.value(py);
        // Setting attributes on a fresh exception object cannot fail.
        let _ = value.setattr("detail", detail);
        let _ = value.setattr("status", status);
    });
    raised
}

/// Runs `call` to its end with the GIL released; a signal Python raises for (Ctrl-C) ends the
/// wait, and the call is dropped.
fn block_on<T: Send>(py: Python<'_>, call: impl Future<Output = Result<T, Error>> + Send) -> PyResult<T> {
    block_on_ticking(py, call, |_| Ok(()))
}

/// [`block_on`] that also runs `tick` with the GIL every 50 ms and once at the end (to show
/// progress from Python's own thread).
fn block_on_ticking<T: Send>(
    py: Python<'_>,
    call: impl Future<Output = Result<T, Error>> + Send,
    mut tick: impl FnMut(Python<'_>) -> PyResult<()>,
) -> PyResult<T> {
    let mut call = std::pin::pin!(call);
    loop {
        let step = py.detach(|| runtime().block_on(async { tokio::time::timeout(TICK, call.as_mut()).await.ok() }));
        tick(py)?;
        match step {
            Some(done) => return done.map_err(to_py),
            None => py.check_signals()?,
        }
    }
}

/// A JSON string of `value`, for the Python side to read.
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("SDK results serialise")
}

/// A request the Python side wrote as JSON, as the SDK's type.
fn request<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> PyResult<T> {
    serde_json::from_str(json).map_err(|e| Invalid::new_err(format!("{what}: {e}")))
}

fn parse_id(field: &str, id: &str) -> PyResult<Uuid> {
    Uuid::parse_str(id).map_err(|_| Invalid::new_err(format!("{field}: expected a UUID, got {id:?}")))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    mission_client::version::identify_as("mission-python", env!("CARGO_PKG_VERSION"));
    m.add_class::<client::NativeClient>()?;
    m.add_class::<auth::NativeAuth>()?;
    m.add_class::<follow::LogFollower>()?;
    for (name, exception) in [
        ("MissionError", py.get_type::<MissionError>()),
        ("NotFound", py.get_type::<NotFound>()),
        ("Unauthorized", py.get_type::<Unauthorized>()),
        ("SignInError", py.get_type::<SignInError>()),
        ("Forbidden", py.get_type::<Forbidden>()),
        ("Invalid", py.get_type::<Invalid>()),
        ("Conflict", py.get_type::<Conflict>()),
        ("ServerError", py.get_type::<ServerError>()),
        ("TransportError", py.get_type::<TransportError>()),
    ] {
        m.add(name, exception)?;
    }
    Ok(())
}
