//! [`NativeClient`]: the SDK's [`Client`] for Python. Requests arrive as JSON the Python side
//! wrote, results leave as JSON the Python side turns into objects.

use std::path::PathBuf;
use std::time::Duration;

use mission_client::{
    AuditQuery, Client, CreateCargoBay, CreateMission, CreateProject, CreateStation, CreateWebhook, ImportImage,
    ListDeliveries, ListJobs, ListMissions, LogStream, ProjectBudget, ProjectLimits, RegisterImageReference,
    RegisterLandingZone, RunJob, UpdateMission, UpdateProject, UpdateStation, UsageQuery, UsageReportQuery,
};
use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;

use crate::auth::{NativeAuth, tokens_json};
use crate::follow::LogFollower;
use crate::transfer::Shown;
use crate::{Invalid, block_on, block_on_ticking, json, parse_id, request, to_py};

fn log_stream(stream: &str) -> PyResult<LogStream> {
    match stream {
        "stdout" => Ok(LogStream::Stdout),
        "stderr" => Ok(LogStream::Stderr),
        other => Err(Invalid::new_err(format!("stream: expected stdout or stderr, got {other:?}"))),
    }
}

/// A signed-in connection to a server, as the Rust SDK's [`Client`].
#[pyclass(module = "mission._native", frozen)]
pub struct NativeClient {
    client: Client,
}

#[pymethods]
impl NativeClient {
    /// A client of the service at `server_url` (several replicas: comma-separated; else the
    /// server `mission login` remembered) with a fixed access token.
    #[new]
    #[pyo3(signature = (server_url, access_token))]
    fn new(server_url: Option<&str>, access_token: &str) -> PyResult<Self> {
        let _guard = crate::runtime().enter();
        let url = mission_client::saved::server_url(server_url).map_err(to_py)?;
        Ok(Self { client: Client::with_access_token(&url, access_token).map_err(to_py)? })
    }

    /// The session `mission login` saved, on `server_url` or the server it remembered.
    #[staticmethod]
    #[pyo3(signature = (server_url))]
    fn from_saved_session(py: Python<'_>, server_url: Option<&str>) -> PyResult<Self> {
        block_on(py, Client::from_saved_session(server_url)).map(|client| Self { client })
    }

    /// Signs in with `auth` (refresh from its token file, else the device flow); the client
    /// renews its access token by itself.
    #[staticmethod]
    fn login(py: Python<'_>, auth: &NativeAuth) -> PyResult<Self> {
        let tokens = block_on(py, auth.auth.initialize())?;
        let client = Client::with_tokens(&auth.server_url, tokens, auth.auth.clone()).map_err(to_py)?;
        Ok(Self { client })
    }

    /// The session's tokens, when it renews them.
    fn tokens(&self, py: Python<'_>) -> PyResult<Option<String>> {
        block_on(py, async { Ok(self.client.tokens().await) }).map(|t| t.as_ref().map(tokens_json))
    }

    /// Revokes the session's refresh token and removes its token file.
    fn logout(&self, py: Python<'_>) -> PyResult<()> {
        block_on(py, self.client.logout())
    }

    fn whoami(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.client.whoami()).map(|u| json(&u))
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

    #[pyo3(signature = (mission_id, payload, rename, verbose, reporter))]
    fn upload(
        &self,
        py: Python<'_>,
        mission_id: &str,
        payload: PathBuf,
        rename: Option<String>,
        verbose: bool,
        reporter: Option<Py<PyAny>>,
    ) -> PyResult<bool> {
        let id = parse_id("mission_id", mission_id)?;
        let shown = Shown::new("uploaded", verbose, reporter);
        let options = shown.options();
        let upload = self.client.upload_with(id, &payload, rename.as_deref(), &options);
        block_on_ticking(py, upload, |py| shown.show(py)).map(|done| done.is_some())
    }

    fn get_mission_files(&self, py: Python<'_>, mission_id: &str) -> PyResult<String> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.get_mission_files(id)).map(|f| json(&f))
    }

    fn delete_file(&self, py: Python<'_>, mission_id: &str, file_path: &str) -> PyResult<bool> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.delete_file(id, file_path))
    }

    fn create_and_upload_mission(&self, py: Python<'_>, mission: &str, directory: PathBuf) -> PyResult<String> {
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
        directory: PathBuf,
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

    fn job_usage(&self, py: Python<'_>, query: &str) -> PyResult<String> {
        let which: UsageQuery = request("job_usage", query)?;
        block_on(py, self.client.job_usage(&which)).map(|u| json(&u))
    }

    fn usage_report(&self, py: Python<'_>, query: &str) -> PyResult<String> {
        let which: UsageReportQuery = request("usage", query)?;
        block_on(py, self.client.usage_report(&which)).map(|u| json(&u))
    }

    fn usage_report_csv(&self, py: Python<'_>, query: &str) -> PyResult<String> {
        let which: UsageReportQuery = request("usage", query)?;
        block_on(py, self.client.usage_report_csv(&which))
    }

    fn audit(&self, py: Python<'_>, query: &str) -> PyResult<String> {
        let which: AuditQuery = request("audit", query)?;
        block_on(py, self.client.audit(&which)).map(|page| json(&page))
    }

    fn audit_jsonl(&self, py: Python<'_>, query: &str) -> PyResult<String> {
        let which: AuditQuery = request("audit", query)?;
        block_on(py, self.client.audit_jsonl(&which))
    }

    fn set_job_labels(&self, py: Python<'_>, job_id: &str, labels: &str) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        let labels: mission_client::Labels = request("set_job_labels", labels)?;
        block_on(py, self.client.set_job_labels(id, &labels)).map(|j| json(&j))
    }

    fn stop_job(&self, py: Python<'_>, job_id: &str) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.stop_job(id)).map(|j| json(&j))
    }

    fn run_job_array(&self, py: Python<'_>, mission_id: &str, body: &str) -> PyResult<String> {
        let id = parse_id("mission_id", mission_id)?;
        let array: mission_client::RunJobArray = request("run_job_array", body)?;
        block_on(py, self.client.run_job_array(id, &array)).map(|a| json(&a))
    }

    fn get_job_array(&self, py: Python<'_>, array_id: &str) -> PyResult<String> {
        let id = parse_id("array_id", array_id)?;
        block_on(py, self.client.get_job_array(id)).map(|a| json(&a))
    }

    fn stop_job_array(&self, py: Python<'_>, array_id: &str) -> PyResult<String> {
        let id = parse_id("array_id", array_id)?;
        block_on(py, self.client.stop_job_array(id)).map(|a| json(&a))
    }

    fn rerun_job(&self, py: Python<'_>, job_id: &str) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.rerun_job(id)).map(|j| json(&j))
    }

    fn rerun_failed_jobs(&self, py: Python<'_>, mission_id: &str) -> PyResult<String> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.rerun_failed_jobs(id)).map(|jobs| json(&jobs))
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

    /// Runs a command line in a running job of the caller's; answers its exit code, output and
    /// error output (as text) as JSON.
    fn run_in_job(&self, py: Python<'_>, job_id: &str, command: &str, input: &[u8]) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        let run = block_on(py, self.client.run_in_job(id, command, input))?;
        Ok(json(&serde_json::json!({
            "exit_code": run.exit_code,
            "stdout": String::from_utf8_lossy(&run.stdout),
            "stderr": String::from_utf8_lossy(&run.stderr),
            "error": run.error,
        })))
    }

    fn job_logs(&self, py: Python<'_>, job_id: &str, stream: &str, node: u32) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.node_logs(id, node, log_stream(stream)?))
    }

    /// An iterator over the job's output as it is written, until the job ends.
    fn follow_job_logs(&self, py: Python<'_>, job_id: &str, stream: &str) -> PyResult<LogFollower> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.open_job_logs(id, log_stream(stream)?)).map(LogFollower::new)
    }

    fn list_job_results(&self, py: Python<'_>, job_id: &str) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        block_on(py, self.client.list_job_results(id)).map(|f| json(&f))
    }

    #[pyo3(signature = (job_id, dest_dir, verbose, reporter))]
    fn download_job_results(
        &self,
        py: Python<'_>,
        job_id: &str,
        dest_dir: PathBuf,
        verbose: bool,
        reporter: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let id = parse_id("job_id", job_id)?;
        let shown = Shown::new("downloaded", verbose, reporter);
        let options = shown.options();
        let download = self.client.download_job_results_with(id, &dest_dir, &options);
        block_on_ticking(py, download, |py| shown.show(py)).map(|s| json(&s))
    }

    /// Downloads the mission's files (or those under `path`, a file or folder) into `dest_dir`.
    #[pyo3(signature = (mission_id, dest_dir, path, verbose, reporter))]
    fn download(
        &self,
        py: Python<'_>,
        mission_id: &str,
        dest_dir: PathBuf,
        path: Option<&str>,
        verbose: bool,
        reporter: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let id = parse_id("mission_id", mission_id)?;
        let shown = Shown::new("downloaded", verbose, reporter);
        let options = shown.options();
        let download = self.client.download_with(id, path, &dest_dir, &options);
        block_on_ticking(py, download, |py| shown.show(py)).map(|s| json(&s))
    }

    fn download_file(&self, py: Python<'_>, mission_id: &str, file_path: &str, dest: PathBuf) -> PyResult<u64> {
        let id = parse_id("mission_id", mission_id)?;
        block_on(py, self.client.download_file(id, file_path, &dest))
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

    // Projects

    fn list_projects(&self, py: Python<'_>, page: u32, items: u32) -> PyResult<String> {
        block_on(py, self.client.list_projects(page, items)).map(|p| json(&p))
    }

    fn get_project(&self, py: Python<'_>, project_id: &str) -> PyResult<String> {
        let id = parse_id("project_id", project_id)?;
        block_on(py, self.client.get_project(id)).map(|p| json(&p))
    }

    fn create_project(&self, py: Python<'_>, project: &str) -> PyResult<String> {
        let project: CreateProject = request("create_project", project)?;
        block_on(py, self.client.create_project(&project)).map(|p| json(&p))
    }

    fn update_project(&self, py: Python<'_>, project_id: &str, changes: &str) -> PyResult<String> {
        let id = parse_id("project_id", project_id)?;
        let changes: UpdateProject = request("update_project", changes)?;
        block_on(py, self.client.update_project(id, &changes)).map(|p| json(&p))
    }

    fn delete_project(&self, py: Python<'_>, project_id: &str) -> PyResult<bool> {
        let id = parse_id("project_id", project_id)?;
        block_on(py, self.client.delete_project(id))
    }

    fn project_members(&self, py: Python<'_>, project_id: &str) -> PyResult<String> {
        let id = parse_id("project_id", project_id)?;
        block_on(py, self.client.project_members(id)).map(|m| json(&m))
    }

    fn set_project_member(&self, py: Python<'_>, project_id: &str, user: &str, role: &str) -> PyResult<String> {
        let id = parse_id("project_id", project_id)?;
        let role = role.parse().map_err(|e: String| Invalid::new_err(format!("role: {e}")))?;
        block_on(py, self.client.set_project_member(id, user, role)).map(|m| json(&m))
    }

    fn remove_project_member(&self, py: Python<'_>, project_id: &str, user: &str) -> PyResult<bool> {
        let id = parse_id("project_id", project_id)?;
        block_on(py, self.client.remove_project_member(id, user))
    }

    fn project_limits(&self, py: Python<'_>, project_id: &str) -> PyResult<String> {
        let id = parse_id("project_id", project_id)?;
        block_on(py, self.client.project_limits(id)).map(|l| json(&l))
    }

    fn set_project_limits(&self, py: Python<'_>, project_id: &str, station_id: &str, limits: &str) -> PyResult<String> {
        let (project, station) = (parse_id("project_id", project_id)?, parse_id("station_id", station_id)?);
        let limits: ProjectLimits = request("set_project_limits", limits)?;
        block_on(py, self.client.set_project_limits(project, station, &limits)).map(|l| json(&l))
    }

    fn delete_project_limits(&self, py: Python<'_>, project_id: &str, station_id: &str) -> PyResult<bool> {
        let (project, station) = (parse_id("project_id", project_id)?, parse_id("station_id", station_id)?);
        block_on(py, self.client.delete_project_limits(project, station))
    }

    fn project_budget(&self, py: Python<'_>, project_id: &str) -> PyResult<Option<String>> {
        let id = parse_id("project_id", project_id)?;
        block_on(py, self.client.project_budget(id)).map(|b| b.map(|b| json(&b)))
    }

    fn set_project_budget(&self, py: Python<'_>, project_id: &str, budget: &str) -> PyResult<String> {
        let project = parse_id("project_id", project_id)?;
        let budget: ProjectBudget = request("set_project_budget", budget)?;
        block_on(py, self.client.set_project_budget(project, &budget)).map(|b| json(&b))
    }

    fn delete_project_budget(&self, py: Python<'_>, project_id: &str) -> PyResult<bool> {
        let project = parse_id("project_id", project_id)?;
        block_on(py, self.client.delete_project_budget(project))
    }

    // Stations and landing zones

    fn list_stations(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.client.list_stations()).map(|s| json(&s))
    }

    fn get_station(&self, py: Python<'_>, station_id: &str) -> PyResult<String> {
        let id = parse_id("station_id", station_id)?;
        block_on(py, self.client.get_station(id)).map(|s| json(&s))
    }

    fn create_station(&self, py: Python<'_>, station: &str) -> PyResult<String> {
        let station: CreateStation = request("create_station", station)?;
        block_on(py, self.client.create_station(&station)).map(|s| json(&s))
    }

    fn update_station(&self, py: Python<'_>, station_id: &str, update: &str) -> PyResult<String> {
        let id = parse_id("station_id", station_id)?;
        let update: UpdateStation = request("update_station", update)?;
        block_on(py, self.client.update_station(id, &update)).map(|s| json(&s))
    }

    fn delete_station(&self, py: Python<'_>, station_id: &str) -> PyResult<bool> {
        let id = parse_id("station_id", station_id)?;
        block_on(py, self.client.delete_station(id))
    }

    fn station_members(&self, py: Python<'_>, station_id: &str) -> PyResult<String> {
        let id = parse_id("station_id", station_id)?;
        block_on(py, self.client.station_members(id)).map(|m| json(&m))
    }

    fn add_station_member(&self, py: Python<'_>, station_id: &str, user: &str) -> PyResult<()> {
        let id = parse_id("station_id", station_id)?;
        block_on(py, self.client.add_station_member(id, user))
    }

    fn remove_station_member(&self, py: Python<'_>, station_id: &str, user: &str) -> PyResult<bool> {
        let id = parse_id("station_id", station_id)?;
        block_on(py, self.client.remove_station_member(id, user))
    }

    fn list_landing_zones(&self, py: Python<'_>, station_id: &str) -> PyResult<String> {
        let id = parse_id("station_id", station_id)?;
        block_on(py, self.client.list_landing_zones(id)).map(|l| json(&l))
    }

    fn register_landing_zone(&self, py: Python<'_>, station_id: &str, lz: &str) -> PyResult<String> {
        let id = parse_id("station_id", station_id)?;
        let lz: RegisterLandingZone = request("register_landing_zone", lz)?;
        block_on(py, self.client.register_landing_zone(id, &lz)).map(|l| json(&l))
    }

    fn remove_landing_zone(&self, py: Python<'_>, station_id: &str, lz_id: &str) -> PyResult<bool> {
        let (station, lz) = (parse_id("station_id", station_id)?, parse_id("lz_id", lz_id)?);
        block_on(py, self.client.remove_landing_zone(station, lz))
    }

    // Cargo bays

    fn list_cargo_bays(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.client.list_cargo_bays()).map(|b| json(&b))
    }

    fn get_cargo_bay(&self, py: Python<'_>, storage_id: &str) -> PyResult<String> {
        let id = parse_id("storage_id", storage_id)?;
        block_on(py, self.client.get_cargo_bay(id)).map(|b| json(&b))
    }

    fn create_cargo_bay(&self, py: Python<'_>, bay: &str) -> PyResult<String> {
        let bay: CreateCargoBay = request("create_cargo_bay", bay)?;
        block_on(py, self.client.create_cargo_bay(&bay)).map(|b| json(&b))
    }

    fn delete_cargo_bay(&self, py: Python<'_>, storage_id: &str) -> PyResult<bool> {
        let id = parse_id("storage_id", storage_id)?;
        block_on(py, self.client.delete_cargo_bay(id))
    }

    fn create_webhook(&self, py: Python<'_>, webhook: &str) -> PyResult<String> {
        let webhook: CreateWebhook = request("create_webhook", webhook)?;
        block_on(py, self.client.create_webhook(&webhook)).map(|w| json(&w))
    }

    #[pyo3(signature = (archive, image, reporter))]
    fn import_image(
        &self,
        py: Python<'_>,
        archive: PathBuf,
        image: &str,
        reporter: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let image: ImportImage = request("import_image", image)?;
        let shown = Shown::new("imported", false, reporter);
        let import = self.client.import_image(&archive, &image, shown.options().observer);
        block_on_ticking(py, import, |py| shown.show(py)).map(|i| json(&i))
    }

    fn register_image_reference(&self, py: Python<'_>, image: &str) -> PyResult<String> {
        let image: RegisterImageReference = request("register_image_reference", image)?;
        block_on(py, self.client.register_image_reference(&image)).map(|i| json(&i))
    }

    fn list_images(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.client.list_images()).map(|i| json(&i))
    }

    fn get_image(&self, py: Python<'_>, image_id: &str) -> PyResult<String> {
        let id = parse_id("image_id", image_id)?;
        block_on(py, self.client.get_image(id)).map(|i| json(&i))
    }

    fn delete_image(&self, py: Python<'_>, image_id: &str) -> PyResult<bool> {
        let id = parse_id("image_id", image_id)?;
        block_on(py, self.client.delete_image(id))
    }

    fn list_webhooks(&self, py: Python<'_>) -> PyResult<String> {
        block_on(py, self.client.list_webhooks()).map(|w| json(&w))
    }

    fn get_webhook(&self, py: Python<'_>, webhook_id: &str) -> PyResult<String> {
        let id = parse_id("webhook_id", webhook_id)?;
        block_on(py, self.client.get_webhook(id)).map(|w| json(&w))
    }

    fn delete_webhook(&self, py: Python<'_>, webhook_id: &str) -> PyResult<bool> {
        let id = parse_id("webhook_id", webhook_id)?;
        block_on(py, self.client.delete_webhook(id))
    }

    fn webhook_deliveries(&self, py: Python<'_>, webhook_id: &str, query: &str) -> PyResult<String> {
        let id = parse_id("webhook_id", webhook_id)?;
        let which: ListDeliveries = request("webhook_deliveries", query)?;
        block_on(py, self.client.webhook_deliveries(id, &which)).map(|d| json(&d))
    }
}
