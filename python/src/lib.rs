//! `mission._native`: the Rust SDK (`mission-client`) as a Python extension module. The Python
//! package `mission` wraps it: results cross as JSON and become Python objects there, errors
//! become the package's exceptions here.
//!
//! Every call runs on one Tokio runtime with the GIL released, and wakes every 50 ms to let
//! Python handle signals, so Ctrl-C interrupts a long call promptly.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use mission_client::{Client, CreateMission, Error, ListJobs, ListMissions, LogStream, RunJob, UpdateMission, Uuid};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTimeoutError};
use pyo3::prelude::*;

create_exception!(mission, MissionError, PyException, "Any error of the Mission Compute SDK.");
create_exception!(mission, NotFound, MissionError, "The resource does not exist, or is not visible to you (404).");
create_exception!(mission, Unauthorized, MissionError, "Not signed in, or the session ended (401).");
create_exception!(mission, Forbidden, MissionError, "You may see the resource but not do this (403).");
create_exception!(mission, Invalid, MissionError, "The request is not valid (400); its detail says why.");
create_exception!(mission, Conflict, MissionError, "The request clashes with the resource's state (409).");
create_exception!(mission, ServerError, MissionError, "The service failed (5xx).");
create_exception!(mission, TransportError, MissionError, "The service could not be reached, or answered nonsense.");

/// How often a waiting call lets Python look at its signals.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("mission-sdk")
            .build()
            .expect("a Tokio runtime")
    })
}

/// The SDK's error as the package's exception (the problem's detail as its message).
fn to_py(error: Error) -> PyErr {
    let detail = error.problem().map(|p| p.detail.clone()).unwrap_or_else(|| error.to_string());
    match error {
        Error::NotFound(_) => NotFound::new_err(detail),
        Error::Unauthorized(_) => Unauthorized::new_err(detail),
        Error::Forbidden(_) => Forbidden::new_err(detail),
        Error::Api(p) if p.status == 400 || p.status == 413 || p.status == 422 => Invalid::new_err(detail),
        Error::Api(p) if p.status == 409 => Conflict::new_err(detail),
        Error::Api(p) if p.status >= 500 => ServerError::new_err(detail),
        Error::Http(_) | Error::Protocol(_) => TransportError::new_err(detail),
        Error::InvalidPath(_) | Error::InvalidUrl(_) => Invalid::new_err(detail),
        _ => MissionError::new_err(detail),
    }
}

/// Runs `call` to its end with the GIL released; a signal Python raises for (Ctrl-C) ends the
/// wait, and the call is dropped.
fn block_on<T: Send>(py: Python<'_>, call: impl Future<Output = Result<T, Error>> + Send) -> PyResult<T> {
    let mut call = std::pin::pin!(call);
    loop {
        let step =
            py.detach(|| runtime().block_on(async { tokio::time::timeout(SIGNAL_CHECK, call.as_mut()).await.ok() }));
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

/// A signed-in connection to a server, as the Rust SDK's [`Client`].
#[pyclass(module = "mission._native", frozen)]
struct NativeClient {
    client: Client,
}

#[pymethods]
impl NativeClient {
    /// A client of the service at `server_url` (several replicas: comma-separated) with an
    /// access token.
    #[new]
    fn new(server_url: &str, access_token: &str) -> PyResult<Self> {
        let _guard = runtime().enter();
        Ok(Self { client: Client::with_access_token(server_url, access_token).map_err(to_py)? })
    }

    /// The server's URLs.
    fn base_urls(&self) -> String {
        self.client.base_urls()
    }

    fn get_mission_by_id(&self, py: Python<'_>, mission_id: &str) -> PyResult<String> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.get_mission_by_id(id)).map(|m| json(&m))
    }

    fn list_missions(&self, py: Python<'_>, query: &str) -> PyResult<String> {
        let options: ListMissions = request("list_missions", query)?;
        block_on(py, self.client.list_missions(&options)).map(|m| json(&m))
    }

    fn create_mission(&self, py: Python<'_>, mission: &str) -> PyResult<String> {
        let mission: CreateMission = request("create_mission", mission)?;
        block_on(py, self.client.create_mission(&mission)).map(|m| json(&m))
    }

    fn update_mission(&self, py: Python<'_>, mission_id: &str, changes: &str) -> PyResult<bool> {
        let (id, changes): (_, UpdateMission) =
            (parse_id("mission_id", mission_id)?, request("update_mission", changes)?);
        block_on(py, self.client.update_mission(id, &changes))
    }

    fn update_mission_args(&self, py: Python<'_>, mission_id: &str, args: Vec<String>) -> PyResult<String> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.update_mission_args(id, &args)).map(|m| json(&m))
    }

    fn delete_mission_by_id(&self, py: Python<'_>, mission_id: &str) -> PyResult<()> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.delete_mission_by_id(id))
    }

    #[pyo3(signature = (mission_id, payload, rename, verbose))]
    fn upload(
        &self,
        py: Python<'_>,
        mission_id: &str,
        payload: std::path::PathBuf,
        rename: Option<String>,
        verbose: bool,
    ) -> PyResult<bool> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.upload(id, &payload, rename.as_deref(), verbose))
    }

    fn get_mission_files(&self, py: Python<'_>, mission_id: &str) -> PyResult<String> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.get_mission_files(id)).map(|f| json(&f))
    }

    fn delete_file(&self, py: Python<'_>, mission_id: &str, file_path: &str) -> PyResult<bool> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.delete_file(id, file_path))
    }

    fn create_and_upload_mission(
        &self,
        py: Python<'_>,
        mission: &str,
        directory: std::path::PathBuf,
    ) -> PyResult<String> {
        let mission: CreateMission = request("create_and_upload_mission", mission)?;
        block_on(py, self.client.create_and_upload_mission(&mission, &directory)).map(|m| json(&m))
    }

    fn run_job(&self, py: Python<'_>, mission_id: &str, run: &str) -> PyResult<String> {
        let (id, run): (_, RunJob) = (parse_id("mission_id", mission_id)?, request("run", run)?);
        block_on(py, self.client.run_job(id, &run)).map(|j| json(&j))
    }

    #[pyo3(signature = (mission, directory, station_id, lz_id))]
    fn create_mission_and_run_job(
        &self,
        py: Python<'_>,
        mission: &str,
        directory: std::path::PathBuf,
        station_id: &str,
        lz_id: Option<&str>,
    ) -> PyResult<String> {
        let mission: CreateMission = request("create_mission_and_run_job", mission)?;
        let station = parse_id("station_id", station_id)?;
        let lz = lz_id.map(|id| parse_id("lz_id", id)).transpose()?;
        block_on(py, self.client.create_mission_and_run_job(&mission, &directory, station, lz)).map(|j| json(&j))
    }

    fn get_job(&self, py: Python<'_>, job_id: &str) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.get_job(id)).map(|j| json(&j))
    }

    fn list_jobs(&self, py: Python<'_>, query: &str) -> PyResult<String> {
        let options: ListJobs = request("list_jobs", query)?;
        block_on(py, self.client.list_jobs(&options)).map(|j| json(&j))
    }

    fn stop_job(&self, py: Python<'_>, job_id: &str) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.stop_job(id)).map(|j| json(&j))
    }

    /// Waits until the job ends (following its log, not polling); a `TimeoutError` after
    /// `timeout` seconds.
    #[pyo3(signature = (job_id, timeout))]
    fn wait_for_job(&self, py: Python<'_>, job_id: &str, timeout: Option<f64>) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        let limit = timeout
            .map(Duration::try_from_secs_f64)
            .transpose()
            .map_err(|e| Invalid::new_err(format!("timeout: {e}")))?;
        let wait = async {
            match limit {
                None => self.client.wait_for_job(id).await.map(Some),
                Some(limit) => match tokio::time::timeout(limit, self.client.wait_for_job(id)).await {
                    Ok(done) => done.map(Some),
                    Err(_) => Ok(None),
                },
            }
        };
        match block_on(py, wait)? {
            Some(job) => Ok(json(&job)),
            None => {
                Err(PyTimeoutError::new_err(format!("job {id} did not end within {} s", timeout.unwrap_or_default())))
            }
        }
    }

    fn job_logs(&self, py: Python<'_>, job_id: &str, stream: &str) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        let stream = match stream {
            "stdout" => LogStream::Stdout,
            "stderr" => LogStream::Stderr,
            other => return Err(Invalid::new_err(format!("stream: expected stdout or stderr, got {other:?}"))),
        };
        block_on(py, self.client.job_logs(id, stream))
    }

    fn download_job_results(&self, py: Python<'_>, job_id: &str, dest_dir: std::path::PathBuf) -> PyResult<u64> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.download_job_results(id, &dest_dir)).map(|s| s.transferred + s.skipped)
    }

    fn list_mission_types(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.client.list_mission_types()).map(|t| json(&t))
    }

    fn get_mission_type(&self, py: Python<'_>, mission_type_id: &str) -> PyResult<String> {
        let id = parse_id("mission_type_id", mission_type_id)?;
        block_on(py, self.client.get_mission_type(id)).map(|t| json(&t))
    }

    fn get_mission_type_settings_info(&self, py: Python<'_>, mission_type_id: &str) -> PyResult<String> {
        let id = parse_id("mission_type_id", mission_type_id)?;
        block_on(py, self.client.get_mission_type_settings_info(id)).map(|t| json(&t))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<NativeClient>()?;
    for (name, exception) in [
        ("MissionError", py.get_type::<MissionError>()),
        ("NotFound", py.get_type::<NotFound>()),
        ("Unauthorized", py.get_type::<Unauthorized>()),
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
