//! Whole folders as one download: a mission's files and a job's results, each one zip archive
//! written as it is sent ([`crate::http::archive`]), with its size announced up front so a browser
//! shows real progress.

use std::future::Future;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use futures_util::StreamExt;
use mission_api::paths::MissionPath;
use mission_api::{FileListing, Job};

use super::extract::{job_id, parse_id};
use super::{async_stream, files, jobs};
use crate::AppState;
use crate::domain::Principal;
use crate::domain::missions;
use crate::http::archive::{ZipEntry, ZipPlan};
use crate::http::error::{ApiError, ApiResult};

/// A mission's files as one zip archive, each under its path in the mission.
#[utoipa::path(get, path = "/api/v1/missions/{id}/archive", tag = "files",
    params(("id" = uuid::Uuid, Path, description = "mission id")),
    responses((status = 200, description = "a zip archive of every file of the mission", content_type = "application/zip"),
        (status = 404, body = mission_api::Problem)))]
pub async fn mission(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Response> {
    let mission = missions::readable(&app, who, parse_id("mission_id", &id)?).await?;
    let listing: Vec<FileListing> =
        app.store.mission_files(mission.mission_id).await?.into_iter().map(FileListing::from).collect();
    let name = format!("{}.zip", download_name(&mission.name));
    zip_response(&name, plan(&listing)?, move |path| {
        let (app, mission) = (app.clone(), mission.clone());
        async move { files::serve_mission_file(&app, &mission, &path, &HeaderMap::new()).await }
    })
}

/// A job's results as one zip archive: every result file and the two logs, as
/// `GET /api/v1/jobs/{id}/results` lists them.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/archive", tag = "jobs",
    params(("id" = String, Path, description = "the job's id (a UUID) or its number", pattern = r"^([0-9]{1,19}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")),
    responses((status = 200, description = "a zip archive of the job's results and logs", content_type = "application/zip"),
        (status = 404, body = mission_api::Problem)))]
pub async fn results(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Response> {
    let job = crate::domain::jobs::readable(&app, who, job_id(&app, who, &id).await?).await?;
    let listing = crate::domain::jobs::result_listing(&app, &job).await?;
    results_archive(app, job, &listing)
}

/// The archive of `job`'s results as `listing` lists them, for a caller who may read them.
pub(super) fn results_archive(app: AppState, job: Job, listing: &[FileListing]) -> ApiResult<Response> {
    zip_response(&results_name(job.job_id), plan(listing)?, move |path| {
        let (app, job) = (app.clone(), job.clone());
        async move { jobs::serve_result(&app, &job, &path, &HeaderMap::new()).await }
    })
}

/// The file name a job's results archive is downloaded as.
pub(super) fn results_name(job_id: uuid::Uuid) -> String {
    format!("job-{job_id}-results.zip")
}

/// The archive of the files `listing` names, under their paths.
pub(super) fn plan(listing: &[FileListing]) -> ApiResult<ZipPlan> {
    let entry = |f: &FileListing| {
        let path = MissionPath::parse(&f.relative_path()).map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(ZipEntry { path, size: f.file_size, modified: f.modified_at })
    };
    Ok(ZipPlan::new(listing.iter().map(entry).collect::<ApiResult<_>>()?))
}

/// The archive `plan` describes as a response named `file_name`: `open` answers the content of
/// each entry, by its path. A file that changes or goes while the archive is sent ends the response early, so
/// the client sees a short body (against the announced length), never a wrong archive.
fn zip_response<F, Fut>(file_name: &str, plan: ZipPlan, open: F) -> ApiResult<Response>
where
    F: Fn(MissionPath) -> Fut + Send + 'static,
    Fut: Future<Output = ApiResult<Response>> + Send,
{
    let size = plan.archive_size();
    let mut writer = plan.writer();
    let archive = file_name.to_owned();
    let body = async_stream(move |tx| async move {
        while let Some((header, entry)) = writer.start_entry() {
            if tx.send(header).await.is_err() {
                return;
            }
            let file = match open(entry.path.clone()).await {
                Ok(file) => file,
                Err(e) => {
                    tracing::warn!(%archive, file = %entry.path, error = ?e, "archive cut short: a file is gone");
                    return;
                }
            };
            let mut data = file.into_body().into_data_stream();
            while let Some(chunk) = data.next().await {
                let Ok(chunk) = chunk else { return };
                writer.data(&chunk);
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
            match writer.end_entry() {
                Ok(descriptor) => {
                    if tx.send(descriptor).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(%archive, error = %e, "archive cut short: a file changed while it was sent");
                    return;
                }
            }
        }
        let _ = tx.send(writer.finish()).await;
    });
    let mut response = Response::new(Body::from_stream(body.map(Ok::<_, std::convert::Infallible>)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/zip"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    headers.insert(header::CONTENT_DISPOSITION, attachment(file_name));
    Ok(response)
}

/// A name fit for a downloaded file: letters, digits, `.`, `-` and `_` of `name`, others as `_`.
fn download_name(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    let safe = safe.trim_matches('.');
    if safe.is_empty() { "mission".to_owned() } else { safe.to_owned() }
}

/// `Content-Disposition: attachment` naming `file_name` (made of [`download_name`]'s characters).
fn attachment(file_name: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"))
}

#[cfg(test)]
mod tests {
    use super::download_name;

    #[test]
    fn download_names_keep_only_safe_characters() {
        assert_eq!(download_name("sweep 2026/ä\"x"), "sweep_2026___x");
        assert_eq!(download_name("../.."), "_");
        assert_eq!(download_name("..."), "mission");
        assert_eq!(download_name("run-1.v2"), "run-1.v2");
    }
}
