//! Jobs: start a mission on a station or one landing zone (spec §4 `run_job_on_station`,
//! `run_job_on_lz`, `create_mission_and_run_job`), follow it, stop it, fetch its logs and results.

use std::path::Path;

use futures_util::StreamExt;
use mission_api::{CreateMission, FileListing, Job, JobPage, JobStatus, RunJob};
use reqwest::Method;
use uuid::Uuid;

use crate::client::check;
use crate::files::{TransferOptions, TransferSummary};
use crate::{Client, Error};

/// Resources a job asks for (spec rule 5); absent ones come from the mission type's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobResources {
    /// CPUs.
    pub cpu_count: Option<u32>,
    /// Memory in megabytes.
    pub memory_amount: Option<u64>,
    /// GPUs.
    pub gpu_count: Option<u32>,
    /// Minutes the job may run before it is ended (`failed`, reason "time limit").
    pub time_limit: Option<u32>,
    /// Landing zones it runs on at once (a gang), each holding the resources above; absent: 1.
    pub nodes: Option<u32>,
    /// How a gang starts its command; absent: on every node.
    pub launch: Option<mission_api::Launch>,
}

/// Filters and paging of [`Client::list_jobs`]; the default is the first 25 of all the caller's
/// jobs, newest first. Readable from JSON, fields left out taking their defaults (for the
/// Python package).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListJobs {
    /// Only these missions' jobs.
    pub mission_ids: Vec<Uuid>,
    /// Only jobs on these stations.
    pub station_ids: Vec<Uuid>,
    /// Only jobs charged to these projects of the caller's: every one, whoever started it.
    pub project_ids: Vec<Uuid>,
    /// Only elements of these job arrays.
    pub array_ids: Vec<Uuid>,
    /// Only jobs in these states.
    pub statuses: Vec<JobStatus>,
    /// Only jobs with every one of these labels (`key`, `value`).
    pub labels: Vec<(String, String)>,
    /// Page number, from 1.
    pub page: u32,
    /// Jobs per page, 1 to [`mission_api::MAX_ITEMS_PER_PAGE`].
    pub items: u32,
}

impl Default for ListJobs {
    fn default() -> Self {
        Self {
            mission_ids: Vec::new(),
            station_ids: Vec::new(),
            project_ids: Vec::new(),
            array_ids: Vec::new(),
            statuses: Vec::new(),
            labels: Vec::new(),
            page: 1,
            items: 25,
        }
    }
}

/// Which jobs [`Client::job_usage`] sums: the default is all the caller's ended jobs. Readable
/// from JSON, fields left out taking their defaults (for the Python package).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageQuery {
    /// Only these missions' jobs.
    pub mission_ids: Vec<Uuid>,
    /// Only jobs that ended at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
}

/// What `GET /usage` reports: how to group the ended jobs the caller may see, and when they
/// ended. Readable from JSON like [`UsageQuery`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageReportQuery {
    /// `project` (the default, when empty), `user` or `label:KEY`.
    pub group_by: String,
    /// Only jobs that ended at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only jobs that ended before this time.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

impl UsageReportQuery {
    fn pairs(&self, format: &str) -> Vec<(&'static str, String)> {
        let time = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let mut pairs = vec![("format", format.to_owned())];
        pairs.extend((!self.group_by.is_empty()).then(|| ("group_by", self.group_by.clone())));
        pairs.extend(self.since.map(|t| ("since", time(t))));
        pairs.extend(self.until.map(|t| ("until", time(t))));
        pairs
    }
}

/// Which output of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl LogStream {
    fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// What following a job's log yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// Output, as it was written.
    Output(String),
    /// The job ended with this status; nothing follows.
    End(JobStatus),
}

pub(crate) type ByteStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// An open follow of a job's log ([`Client::open_job_logs`]): server-sent events, read as they
/// arrive.
pub struct LogFollow {
    body: ByteStream,
    buf: Vec<u8>,
    ended: Option<JobStatus>,
}

impl std::fmt::Debug for LogFollow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogFollow").field("ended", &self.ended).finish_non_exhaustive()
    }
}

impl LogFollow {
    /// The next piece of output, or the end (again on every call after it).
    pub async fn next(&mut self) -> Result<LogEvent, Error> {
        loop {
            if let Some(status) = self.ended {
                return Ok(LogEvent::End(status));
            }
            while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..end + 2).collect();
                if let Some(event) = parse_log_event(&String::from_utf8_lossy(&event))? {
                    if let LogEvent::End(status) = event {
                        self.ended = Some(status);
                    }
                    return Ok(event);
                }
            }
            match self.body.next().await {
                Some(chunk) => self.buf.extend_from_slice(&chunk?),
                None => return Err(Error::Protocol("the log stream ended before the job did".into())),
            }
        }
    }
}

/// One server-sent event of a log follow; `None` for one without data (a keep-alive).
fn parse_log_event(event: &str) -> Result<Option<LogEvent>, Error> {
    let crate::events::Sse { event, data } = crate::events::Sse::parse(event);
    if event.as_deref() == Some("end") {
        #[derive(serde::Deserialize)]
        struct End {
            status: JobStatus,
        }
        let end: End =
            serde_json::from_str(&data).map_err(|e| Error::Protocol(format!("cannot read the end of the log: {e}")))?;
        return Ok(Some(LogEvent::End(end.status)));
    }
    if data.is_empty() {
        return Ok(None);
    }
    let text: String =
        serde_json::from_str(&data).map_err(|e| Error::Protocol(format!("cannot read a log event: {e}")))?;
    Ok(Some(LogEvent::Output(text)))
}

impl Client {
    /// Starts a job from a mission on a station (spec `run_job_on_station`); it is placed on
    /// whichever landing zone has room.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, mission: uuid::Uuid, station: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// use mission_client::JobResources;
    /// let job = client.run_job_on_station(mission, station, JobResources { cpu_count: Some(2), ..Default::default() }).await?;
    /// let done = client.wait_for_job(job.job_id).await?;
    /// println!("{} {:?}", done.status, done.exit_code);
    /// # Ok(()) }
    /// ```
    pub async fn run_job_on_station(
        &self,
        mission_id: Uuid,
        station_id: Uuid,
        resources: JobResources,
    ) -> Result<Job, Error> {
        self.run_job(mission_id, &run_request(station_id, None, resources)).await
    }

    /// Starts a job from a mission on one landing zone of a station (spec `run_job_on_lz`).
    pub async fn run_job_on_lz(
        &self,
        mission_id: Uuid,
        station_id: Uuid,
        lz_id: Uuid,
        resources: JobResources,
    ) -> Result<Job, Error> {
        self.run_job(mission_id, &run_request(station_id, Some(lz_id), resources)).await
    }

    /// Starts a job from a mission with a full request.
    pub async fn run_job(&self, mission_id: Uuid, request: &RunJob) -> Result<Job, Error> {
        self.send_json(Method::POST, &format!("/missions/{mission_id}/jobs"), request).await
    }

    /// Queues a batch job: a script run in the directory it was submitted from, as the user's
    /// own account (see [`mission_api::batch`]; what `sbatch` sends).
    pub async fn submit_batch_job(&self, request: &mission_api::SubmitBatchJob) -> Result<Job, Error> {
        self.send_json(Method::POST, "/jobs", request).await
    }

    /// Creates a mission, uploads `directory` to it and starts a job on the station, or on the
    /// landing zone `lz_id` (spec rule 4). The job gets the mission type's default resources.
    pub async fn create_mission_and_run_job(
        &self,
        request: &CreateMission,
        directory: &Path,
        station_id: Uuid,
        lz_id: Option<Uuid>,
    ) -> Result<Job, Error> {
        let mission = self.create_and_upload_mission(request, directory).await?;
        self.run_job(mission.mission_id, &run_request(station_id, lz_id, JobResources::default())).await
    }

    /// One job with its history, named by id or by number.
    pub async fn get_job(&self, job: impl Into<mission_api::JobRef>) -> Result<Job, Error> {
        self.get_json(&format!("/jobs/{}", job.into()), &[]).await
    }

    /// The caller's jobs matching `options`, newest first (without their histories).
    pub async fn list_jobs(&self, options: &ListJobs) -> Result<Vec<Job>, Error> {
        Ok(self.list_jobs_page(options).await?.jobs)
    }

    /// [`Client::list_jobs`] with the page's numbers and the total count.
    pub async fn list_jobs_page(&self, options: &ListJobs) -> Result<JobPage, Error> {
        let mut query: Vec<(&str, String)> =
            vec![("page", options.page.to_string()), ("items", options.items.to_string())];
        query.extend(options.mission_ids.iter().map(|id| ("mission_ids", id.to_string())));
        query.extend(options.station_ids.iter().map(|id| ("station_ids", id.to_string())));
        query.extend(options.project_ids.iter().map(|id| ("project_ids", id.to_string())));
        query.extend(options.array_ids.iter().map(|id| ("array_ids", id.to_string())));
        query.extend(options.statuses.iter().map(|s| ("statuses", s.as_str().to_owned())));
        query.extend(options.labels.iter().map(|(key, value)| ("label", format!("{key}={value}"))));
        self.get_json("/jobs", &query).await
    }

    /// What the caller's ended jobs used, summed (`GET /jobs/usage`): count, wall and CPU
    /// hours, mean CPU efficiency, and the jobs that asked for more than twice the memory they
    /// used.
    pub async fn job_usage(&self, query: &UsageQuery) -> Result<mission_api::UsageSummary, Error> {
        let mut pairs: Vec<(&str, String)> =
            query.mission_ids.iter().map(|id| ("mission_ids", id.to_string())).collect();
        pairs.extend(query.since.map(|t| ("since", t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))));
        self.get_json("/jobs/usage", &pairs).await
    }

    /// What the ended jobs the caller may see used, per project, user or label value: every job
    /// for an admin, those charged to the projects they manage and their own for others.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client) -> Result<(), mission_client::Error> {
    /// use mission_client::UsageReportQuery;
    /// let query = UsageReportQuery { group_by: "label:sweep".into(), ..Default::default() };
    /// for group in client.usage_report(&query).await?.groups {
    ///     println!("{:?}: {:.1} CPU-hours held", group.group, group.cpu_hours_held);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn usage_report(&self, query: &UsageReportQuery) -> Result<mission_api::UsageReport, Error> {
        self.get_json("/usage", &query.pairs("json")).await
    }

    /// [`Client::usage_report`] as the server writes it in CSV.
    pub async fn usage_report_csv(&self, query: &UsageReportQuery) -> Result<String, Error> {
        let pairs = query.pairs("csv");
        let response =
            crate::client::check(self.send("/usage", |http, url| http.get(url).query(&pairs)).await?).await?;
        Ok(response.text().await?)
    }

    /// Replaces a job's labels; answers the job.
    pub async fn set_job_labels(&self, job_id: Uuid, labels: &crate::Labels) -> Result<Job, Error> {
        let update = mission_api::UpdateJob { labels: Some(labels.clone()) };
        self.send_json(Method::PATCH, &format!("/jobs/{job_id}"), &update).await
    }

    /// Stops a job: a queued one is dequeued, a running one's process tree is killed. Answers the
    /// job as it stands right after (`stopped` at once when it was queued).
    pub async fn stop_job(&self, job_id: Uuid) -> Result<Job, Error> {
        self.send_json(Method::POST, &format!("/jobs/{job_id}/stop"), &serde_json::json!({})).await
    }

    /// Holds a queued job: it keeps its place in line but does not start until released.
    pub async fn hold_job(&self, job_id: Uuid) -> Result<Job, Error> {
        self.send_json(Method::POST, &format!("/jobs/{job_id}/hold"), &serde_json::json!({})).await
    }

    /// Releases a held job: it starts once what else it waits for has ended.
    pub async fn release_job(&self, job_id: Uuid) -> Result<Job, Error> {
        self.send_json(Method::POST, &format!("/jobs/{job_id}/release"), &serde_json::json!({})).await
    }

    /// Puts a running job back in line at its old place: its landing zone stops it and it runs
    /// again when placed.
    pub async fn requeue_job(&self, job_id: Uuid) -> Result<Job, Error> {
        self.send_json(Method::POST, &format!("/jobs/{job_id}/requeue"), &serde_json::json!({})).await
    }

    /// Starts a job array: one job per element of `request` (a range with arguments in which
    /// `{}` stands for the index, or a list of argument sets), each with its index in
    /// `MISSION_ARRAY_INDEX`; answers the array with its progress.
    pub async fn run_job_array(
        &self,
        mission_id: Uuid,
        request: &mission_api::RunJobArray,
    ) -> Result<mission_api::JobArray, Error> {
        self.send_json(Method::POST, &format!("/missions/{mission_id}/job-arrays"), request).await
    }

    /// How far a job array's elements got (`list_jobs` with `array_ids` lists them).
    pub async fn get_job_array(&self, array_id: Uuid) -> Result<mission_api::JobArray, Error> {
        self.get_json(&format!("/job-arrays/{array_id}"), &[]).await
    }

    /// Stops every element of a job array that has not ended; answers the array after.
    pub async fn stop_job_array(&self, array_id: Uuid) -> Result<mission_api::JobArray, Error> {
        self.send_json(Method::POST, &format!("/job-arrays/{array_id}/stop"), &serde_json::json!({})).await
    }

    /// Starts an ended job again as a new job: the same mission, command, resources (as its
    /// last attempt asked for them), labels and retry policy; the new job's `rerun_of` names
    /// this one. A job that has not ended is a conflict.
    pub async fn rerun_job(&self, job_id: Uuid) -> Result<Job, Error> {
        self.send_json(Method::POST, &format!("/jobs/{job_id}/rerun"), &serde_json::json!({})).await
    }

    /// Starts again every job of the mission that failed or was lost and was not started again
    /// yet, as [`Client::rerun_job`] does each (completed and stopped ones are left alone);
    /// answers the new jobs, oldest first. At most [`mission_api::MAX_RERUNS`] a call.
    pub async fn rerun_failed_jobs(&self, mission_id: Uuid) -> Result<Vec<Job>, Error> {
        let path = format!("/missions/{mission_id}/jobs/rerun-failed");
        let rerun: mission_api::RerunJobs = self.send_json(Method::POST, &path, &serde_json::json!({})).await?;
        Ok(rerun.jobs)
    }

    /// A job's output so far.
    pub async fn job_logs(&self, job_id: Uuid, stream: LogStream) -> Result<String, Error> {
        self.node_logs(job_id, 0, stream).await
    }

    /// The output so far of node `node` (its rank) of a job on several landing zones (a gang);
    /// node 0 is any job's own.
    pub async fn node_logs(&self, job_id: Uuid, node: u32, stream: LogStream) -> Result<String, Error> {
        let query = [("stream", stream.as_str().to_owned()), ("node", node.to_string())];
        let response =
            check(self.send(&format!("/jobs/{job_id}/logs"), |http, url| http.get(url).query(&query)).await?).await?;
        Ok(response.text().await?)
    }

    /// Follows a job's output: `on_output` gets every piece as it is written, from the start,
    /// until the job ends; answers the job's final status.
    pub async fn follow_job_logs(
        &self,
        job_id: Uuid,
        stream: LogStream,
        on_output: impl FnMut(&str),
    ) -> Result<JobStatus, Error> {
        self.follow_node_logs(job_id, 0, stream, on_output).await
    }

    /// [`Client::follow_job_logs`] for node `node` of a gang ([`Client::node_logs`]).
    pub async fn follow_node_logs(
        &self,
        job_id: Uuid,
        node: u32,
        stream: LogStream,
        mut on_output: impl FnMut(&str),
    ) -> Result<JobStatus, Error> {
        let mut follow = self.open_node_logs(job_id, node, stream).await?;
        loop {
            match follow.next().await? {
                LogEvent::Output(text) => on_output(&text),
                LogEvent::End(status) => return Ok(status),
            }
        }
    }

    /// Opens a follow of a job's output, to be read piece by piece with [`LogFollow::next`]
    /// (reading slowly holds the server back instead of piling output up in memory).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, job: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// use mission_client::{LogEvent, LogStream};
    /// let mut follow = client.open_job_logs(job, LogStream::Stdout).await?;
    /// while let LogEvent::Output(text) = follow.next().await? {
    ///     print!("{text}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn open_job_logs(&self, job_id: Uuid, stream: LogStream) -> Result<LogFollow, Error> {
        self.open_node_logs(job_id, 0, stream).await
    }

    /// [`Client::open_job_logs`] for node `node` of a gang ([`Client::node_logs`]).
    pub async fn open_node_logs(&self, job_id: Uuid, node: u32, stream: LogStream) -> Result<LogFollow, Error> {
        let query = [("stream", stream.as_str().to_owned()), ("node", node.to_string()), ("follow", "true".to_owned())];
        let response =
            check(self.send(&format!("/jobs/{job_id}/logs"), |http, url| http.get(url).query(&query)).await?).await?;
        Ok(LogFollow { body: Box::pin(response.bytes_stream()), buf: Vec::new(), ended: None })
    }

    /// Waits until a job ends (following the event stream, not polling) and answers it.
    pub async fn wait_for_job(&self, job_id: Uuid) -> Result<Job, Error> {
        self.wait_for_job_with(job_id, |_| {}).await
    }

    /// [`Client::wait_for_job`], telling `on_status` each status the job moves to.
    pub async fn wait_for_job_with(&self, job_id: Uuid, mut on_status: impl FnMut(JobStatus)) -> Result<Job, Error> {
        // Every event of the job still kept, from its first: none can be missed between the
        // job's state read here and the stream's start.
        let watch = crate::WatchEvents {
            job_ids: vec![job_id],
            kinds: vec!["job".into()],
            after: Some(0),
            ..Default::default()
        };
        let (job, events) = tokio::join!(self.get_job(job_id), self.watch_events(&watch));
        let job = job?;
        if job.status.is_final() {
            return Ok(job);
        }
        let mut events = events?;
        loop {
            match events.next().await {
                Ok(event) => match event.job_status() {
                    Some(status) if status.is_final() => return self.get_job(job_id).await,
                    Some(status) => on_status(status),
                    None => {}
                },
                // Some of the job's events are gone: its state says whether it has ended.
                Err(Error::EventsMissed { .. }) => {
                    let job = self.get_job(job_id).await?;
                    if job.status.is_final() {
                        return Ok(job);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A job's results: its new or changed files and its two logs under `mission-logs/`.
    pub async fn list_job_results(&self, job_id: Uuid) -> Result<Vec<FileListing>, Error> {
        self.get_json(&format!("/jobs/{job_id}/results"), &[]).await
    }

    /// Downloads a job's results into `dest_dir` (created if needed), each file checked by its
    /// SHA-256; files already there with the same content are skipped.
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, job: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// let summary = client.download_job_results(job, "results".as_ref()).await?;
    /// println!("{} files", summary.transferred);
    /// # Ok(()) }
    /// ```
    pub async fn download_job_results(&self, job_id: Uuid, dest_dir: &Path) -> Result<TransferSummary, Error> {
        self.download_job_results_with(job_id, dest_dir, &TransferOptions::default()).await
    }

    /// [`Client::download_job_results`] with options (progress, concurrency).
    pub async fn download_job_results_with(
        &self,
        job_id: Uuid,
        dest_dir: &Path,
        options: &TransferOptions,
    ) -> Result<TransferSummary, Error> {
        let files = self.list_job_results(job_id).await?;
        let place = |path: &mission_api::paths::MissionPath| format!("/jobs/{job_id}/results/{}", path.to_url_path());
        self.download_listing(files, &place, &format!("job {job_id}"), None, dest_dir, options).await
    }
}

fn run_request(station_id: Uuid, lz_id: Option<Uuid>, resources: JobResources) -> RunJob {
    RunJob {
        station_id,
        lz_id,
        cpu_count: resources.cpu_count,
        memory_amount: resources.memory_amount,
        gpu_count: resources.gpu_count,
        time_limit: resources.time_limit,
        nodes: resources.nodes,
        launch: resources.launch,
        ..Default::default()
    }
}
