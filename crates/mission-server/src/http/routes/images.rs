//! The images API: import (the archive streamed as the body), list, read, delete, over
//! [`crate::domain::images`].

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use mission_api::{Image, ImageVisibility, ImportImage, RegisterImageReference};

use super::extract::{ApiJson, QueryPairs, parse_id};
use super::files::announced;
use crate::AppState;
use crate::domain::Principal;
use crate::domain::images;
use crate::http::error::{ApiError, ApiResult};

/// Imports an image: the body is an OCI or docker archive (as `podman save` or `docker save`
/// writes it, not compressed), stored whole or not at all, up to the server's
/// `--max-image-size`. `name` is unique among the caller's images; `visibility` (`private`,
/// `project` or `public`, admins only) says who sees it; `project_id` (default: the caller's
/// personal project) is the project whose members see a `project` image.
#[utoipa::path(post, path = "/api/v1/images", tag = "images",
    params(ImportImage),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = Image), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 409, body = mission_api::Problem),
        (status = 413, body = mission_api::Problem)))]
pub async fn import(
    State(app): State<AppState>,
    who: Principal,
    QueryPairs(query): QueryPairs,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<Image>)> {
    let mut request = ImportImage::default();
    let mut named = false;
    for (key, value) in &query {
        match key.as_str() {
            "name" => (request.name, named) = (value.clone(), true),
            "visibility" => {
                request.visibility = value.parse::<ImageVisibility>().map_err(|e| ApiError::invalid_field(key, e))?;
            }
            "project_id" => request.project_id = Some(parse_id("project_id", value)?),
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}; an import takes name, visibility, project_id"
                )));
            }
        }
    }
    if !named {
        return Err(ApiError::invalid_field("name", "an imported image needs a name"));
    }
    let image = images::import(&app, who, request, announced(&headers), body.into_data_stream()).await?;
    Ok((StatusCode::CREATED, Json(image)))
}

/// Registers an image that landing zones pull from a container registry: `reference` is
/// `HOST[:PORT]/PATH[:TAG]@sha256:HEX`, pinned by its manifest's digest, in a registry the server
/// allows (`--image-registry`; admins may name any).
#[utoipa::path(post, path = "/api/v1/images/references", tag = "images", request_body = RegisterImageReference,
    responses((status = 201, body = Image), (status = 400, body = mission_api::Problem),
        (status = 403, body = mission_api::Problem), (status = 409, body = mission_api::Problem)))]
pub async fn register_reference(
    State(app): State<AppState>,
    who: Principal,
    ApiJson(request): ApiJson<RegisterImageReference>,
) -> ApiResult<(StatusCode, Json<Image>)> {
    Ok((StatusCode::CREATED, Json(images::register_reference(&app, who, request).await?)))
}

/// Lists the images the caller sees (every one, for admins), by name.
#[utoipa::path(get, path = "/api/v1/images", tag = "images", responses((status = 200, body = [Image])))]
pub async fn list(State(app): State<AppState>, who: Principal) -> ApiResult<Json<Vec<Image>>> {
    Ok(Json(images::list(&app, who).await?))
}

/// One image.
#[utoipa::path(get, path = "/api/v1/images/{id}", tag = "images",
    params(("id" = uuid::Uuid, Path, description = "image id")),
    responses((status = 200, body = Image), (status = 404, body = mission_api::Problem)))]
pub async fn get(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<Json<Image>> {
    Ok(Json(images::get(&app, who, parse_id("image_id", &id)?).await?))
}

/// Deletes an image of the caller's (any, for admins), unless a job that has not ended runs in
/// it (409).
#[utoipa::path(delete, path = "/api/v1/images/{id}", tag = "images",
    params(("id" = uuid::Uuid, Path, description = "image id")),
    responses((status = 204), (status = 403, body = mission_api::Problem), (status = 404, body = mission_api::Problem),
        (status = 409, body = mission_api::Problem)))]
pub async fn delete(State(app): State<AppState>, who: Principal, Path(id): Path<String>) -> ApiResult<StatusCode> {
    images::delete(&app, who, parse_id("image_id", &id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}
