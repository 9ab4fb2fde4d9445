//! The HTTP surface: the versioned API under `/api/v1`, service endpoints, and the built-in
//! identity provider at the root when it is enabled.

mod archives;
mod audit;
pub(crate) mod cargo_bays;
mod events;
pub(crate) mod extract;
pub(crate) mod files;
mod galileo;
mod images;
pub(crate) mod jobs;
pub(crate) mod lz;
mod meta;
mod mission_types;
pub(crate) mod missions;
mod projects;
pub(crate) mod stations;
mod tes;
mod webhooks;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use utoipa::OpenApi;
use utoipa::openapi::RefOr;

use crate::AppState;
use crate::http::deprecation::MarkDeprecated;
use crate::http::error::ApiError;

pub use extract::MAX_JSON_BODY_BYTES;
pub use files::{RecoveryError, recover as recover_files, settle_stopped_replicas};

/// The OpenAPI document, generated from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(title = "Mission Compute Service API", description = "Missions, their files, jobs, events and webhooks, container images, cargo bays, stations, projects, mission types and sign-in configuration."),
    paths(
        missions::create, missions::list, missions::get, missions::update, missions::set_args, missions::delete,
        files::list, files::upload, files::download, files::delete, archives::mission,
        events::stream, jobs::run, jobs::submit_batch, jobs::list, jobs::usage, jobs::events, jobs::get, jobs::update, jobs::stop, jobs::hold, jobs::release, jobs::requeue, crate::http::shell::open_shell, jobs::rerun, jobs::rerun_failed, jobs::run_array, jobs::get_array, jobs::stop_array, jobs::logs, jobs::results, jobs::result, archives::results,
        cargo_bays::list, cargo_bays::create, cargo_bays::get, cargo_bays::delete,
        webhooks::create, webhooks::list, webhooks::get, webhooks::delete, webhooks::deliveries,
        images::import, images::register_reference, images::list, images::get, images::delete,
        stations::list, stations::create, stations::get, stations::update, stations::delete, stations::members,
        stations::add_member, stations::remove_member, stations::landing_zones,
        stations::register_landing_zone, stations::remove_landing_zone,
        projects::create, projects::list, projects::get, projects::update, projects::delete, projects::members,
        projects::set_member, projects::remove_member, projects::limits, projects::set_limits, projects::delete_limits,
        projects::budget, projects::set_budget, projects::delete_budget, projects::usage, audit::list,
        mission_types::list, mission_types::get, mission_types::settings,
        meta::auth_config, meta::me,
    ),
    components(schemas(mission_api::Problem, mission_api::Event)),
    modifiers(&BearerAuth, &TruthfulDocument, &MarkDeprecated),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

/// The OpenAPI document as served: [`ApiDoc`] with the Rust doc links its descriptions took from
/// the code (`[`MAX_ATTEMPTS`]`, `[`RunJob::retry`]`) written for the API's readers: a limit
/// as its value, any other name as code.
pub fn document() -> serde_json::Value {
    let mut document = serde_json::to_value(ApiDoc::openapi()).expect("OpenAPI serialises");
    rewrite_doc_links(&mut document);
    document
}

/// The limits descriptions name, with their values.
const DOCUMENTED_LIMITS: &[(&str, u64)] = &[
    ("MAX_ARRAY_SIZE", mission_api::jobs::MAX_ARRAY_SIZE as u64),
    ("MAX_ATTEMPTS", mission_api::jobs::MAX_ATTEMPTS as u64),
    ("MAX_BACKOFF", mission_api::jobs::MAX_BACKOFF as u64),
    ("MAX_DEPENDENCIES", mission_api::jobs::MAX_DEPENDENCIES as u64),
    ("MIN_LOG_CAP", mission_api::jobs::MIN_LOG_CAP),
    ("MAX_RERUNS", mission_api::MAX_RERUNS as u64),
];

fn rewrite_doc_links(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                match field {
                    serde_json::Value::String(text) if key == "description" || key == "summary" => {
                        *text = without_doc_links(text);
                    }
                    _ => rewrite_doc_links(field),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(rewrite_doc_links),
        _ => {}
    }
}

/// `text` with each ``[`path::Name`]`` as `` `Name` ``, or as its value where it names a limit.
fn without_doc_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        let Some(length) = rest[start + 2..].find("`]") else { break };
        let path = &rest[start + 2..start + 2 + length];
        let name = path.rsplit("::").next().unwrap_or(path);
        out.push_str(&rest[..start]);
        match DOCUMENTED_LIMITS.iter().find(|(limit, _)| *limit == name) {
            Some((_, value)) => out.push_str(&value.to_string()),
            None => out.push_str(&format!("`{name}`")),
        }
        rest = &rest[start + 2 + length + 2..];
    }
    out.push_str(rest);
    out
}

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

/// Makes the document say what the handlers check: the field rules below, mission paths'
/// rule, and, for every operation, the errors it can answer, all as `application/problem+json`
/// [`mission_api::Problem`]s: 401 where it needs a token (all but `/auth-config`, which is marked
/// as needing none), 400 where a path or query parameter or a body can be malformed, 404 where
/// a path names something, 403 where it names something or changes anything (permissions are
/// checked on both), 413 and 415 where it takes a body. Statuses only some operations answer
/// (409, 416) are in their own annotations.
struct TruthfulDocument;

/// Operations anyone may call, without a token.
const PUBLIC_OPERATIONS: &[&str] = &["/api/v1/auth-config"];

/// [`mission_api::paths::MissionPath::parse`]'s rule as a JSON Schema pattern: segments of 1 to
/// [`mission_api::paths::MAX_SEGMENT_BYTES`] characters without `/`, `\\` or control
/// characters, none of them `..` or ending in `#` and digits, not all of them `.`. (The limits
/// are in bytes, which a pattern cannot count: names of many multi-byte characters may pass
/// the pattern and still be refused.)
fn mission_path_pattern() -> String {
    let max = mission_api::paths::MAX_SEGMENT_BYTES;
    let segment = format!(r"(?!\.\.(?:/|$))(?![^/]*#[0-9]+(?:/|$))[^/\\\u0000-\u001F\u007F-\u009F]{{1,{max}}}");
    format!(r"^(?!(?:\.(?:/|$))+$){segment}(?:/{segment})*$")
}

/// What the handlers check of body fields the types alone do not say, as schema constraints:
/// (schema, property, most characters, pattern).
const FIELD_RULES: &[(&str, &str, usize, &str)] = &[
    ("CreateMission", "name", crate::domain::MAX_NAME_CHARS, crate::domain::NAME_PATTERN),
    ("UpdateMission", "name", crate::domain::MAX_NAME_CHARS, crate::domain::NAME_PATTERN),
    ("CreateCargoBay", "name", crate::domain::MAX_NAME_CHARS, crate::domain::NAME_PATTERN),
    ("CreateStation", "name", crate::domain::MAX_NAME_CHARS, crate::domain::NAME_PATTERN),
    ("RegisterLandingZone", "name", crate::domain::MAX_NAME_CHARS, crate::domain::NAME_PATTERN),
    ("CreateProject", "name", crate::domain::MAX_NAME_CHARS, crate::domain::NAME_PATTERN),
    ("UpdateProject", "name", crate::domain::MAX_NAME_CHARS, crate::domain::NAME_PATTERN),
    ("CreateMission", "description", crate::domain::MAX_DESCRIPTION_CHARS, NO_NUL),
    ("UpdateMission", "description", crate::domain::MAX_DESCRIPTION_CHARS, NO_NUL),
    ("CreateProject", "description", crate::domain::MAX_DESCRIPTION_CHARS, NO_NUL),
    ("UpdateProject", "description", crate::domain::MAX_DESCRIPTION_CHARS, NO_NUL),
    ("RegisterLandingZone", "cluster_account", 32, "^[A-Za-z0-9_.][A-Za-z0-9_.-]*$"),
];

/// A string without NUL.
const NO_NUL: &str = r"^[^\u0000]*$";

/// A string without control characters (Unicode's category Cc, as `char::is_control`).
const NO_CONTROL: &str = r"^[^\u0000-\u001F\u007F-\u009F]*$";

/// What the handlers check of query parameters the types alone do not say: (path, parameter,
/// rule); a rule on a repeated parameter holds for each value.
fn query_rules() -> Vec<(&'static str, &'static str, QueryRule)> {
    use QueryRule::{DateTime, Pattern, Range};
    let key = mission_api::labels::LABEL_KEY_PATTERN;
    let label =
        format!("^{key}=[^\\u0000-\\u001F\\u007F-\\u009F]{{0,{}}}$", mission_api::labels::MAX_LABEL_VALUE_BYTES);
    vec![
        ("/api/v1/audit", "actor", Pattern(".".into())),
        ("/api/v1/audit", "since", DateTime),
        ("/api/v1/audit", "until", DateTime),
        ("/api/v1/audit", "format", Pattern("^(json|jsonl)$".into())),
        ("/api/v1/jobs", "label", Pattern(label.clone())),
        ("/api/v1/missions", "search", Pattern(NO_CONTROL.into())),
        ("/api/v1/missions", "label", Pattern(label)),
        ("/api/v1/jobs/usage", "since", DateTime),
        ("/api/v1/usage", "group_by", Pattern(format!("^(project|user|label:{key})$"))),
        ("/api/v1/usage", "since", DateTime),
        ("/api/v1/usage", "until", DateTime),
        ("/api/v1/usage", "format", Pattern("^(json|csv)$".into())),
        ("/api/v1/webhooks/{id}/deliveries", "limit", Range(1, webhooks::DELIVERIES_PAGE.1.into())),
    ]
}

/// The schema of raw bytes: `{"type": "string", "format": "binary"}`.
fn binary_string() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
    ObjectBuilder::new().schema_type(Type::String).format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary))).into()
}

/// A constraint on a query parameter's values.
enum QueryRule {
    /// A regular expression its values match.
    Pattern(String),
    /// Its least and greatest values.
    Range(u64, u64),
    /// An RFC 3339 time.
    DateTime,
}

impl QueryRule {
    fn apply(&self, schema: &mut utoipa::openapi::schema::Object) {
        use utoipa::openapi::schema::{KnownFormat, SchemaFormat};
        match self {
            QueryRule::Pattern(pattern) => schema.pattern = Some(pattern.clone()),
            QueryRule::Range(least, most) => {
                schema.minimum = Some((*least).into());
                schema.maximum = Some((*most).into());
            }
            QueryRule::DateTime => schema.format = Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)),
        }
    }
}

impl utoipa::Modify for TruthfulDocument {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::{HttpMethod, ParameterIn};
        use utoipa::openapi::schema::{AdditionalProperties, ArrayItems, Schema};
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let schemas = &mut openapi.components.get_or_insert_with(Default::default).schemas;
        for (body, name, most, pattern) in FIELD_RULES {
            if let Some(RefOr::T(Schema::Object(object))) = schemas.get_mut(*body)
                && let Some(RefOr::T(Schema::Object(field))) = object.properties.get_mut(*name)
            {
                field.max_length = Some(*most);
                field.pattern = Some((*pattern).to_owned());
            }
        }
        for body in ["UpdateMission", "UpdateMissionArgs"] {
            let Some(RefOr::T(Schema::Object(object))) = schemas.get_mut(body) else { continue };
            let Some(RefOr::T(Schema::Array(args))) = object.properties.get_mut("args") else { continue };
            args.max_items = Some(crate::domain::missions::MAX_ARGS);
            if let ArrayItems::RefOrSchema(item) = &mut args.items
                && let RefOr::T(Schema::Object(item)) = item.as_mut()
            {
                item.max_length = Some(crate::domain::missions::MAX_ARG_BYTES);
                item.pattern = Some(NO_NUL.to_owned());
            }
        }
        for (path, name, rule) in query_rules() {
            let item = openapi.paths.paths.get_mut(path).expect("a query rule's path is in the document");
            let parameter = item
                .get
                .as_mut()
                .and_then(|get| get.parameters.as_mut())
                .and_then(|parameters| parameters.iter_mut().find(|p| p.name == name))
                .expect("a query rule's parameter is in the document");
            match &mut parameter.schema {
                Some(RefOr::T(Schema::Object(object))) => rule.apply(object),
                Some(RefOr::T(Schema::Array(array))) => match &mut array.items {
                    ArrayItems::RefOrSchema(item) => match item.as_mut() {
                        RefOr::T(Schema::Object(object)) => rule.apply(object),
                        _ => panic!("{path} {name}: items are not an inline schema"),
                    },
                    ArrayItems::False => panic!("{path} {name}: no items"),
                },
                _ => panic!("{path} {name}: not an inline schema"),
            }
        }
        if let Some(RefOr::T(Schema::Object(labels))) = schemas.get_mut("BTreeMap") {
            use mission_api::labels::{LABEL_KEY_PATTERN, MAX_LABEL_VALUE_BYTES, MAX_LABELS};
            labels.max_properties = Some(MAX_LABELS);
            if let Some(names) = &mut labels.property_names
                && let Schema::Object(names) = names.as_mut()
            {
                names.pattern = Some(format!("^{LABEL_KEY_PATTERN}$"));
            }
            if let AdditionalProperties::RefOr(RefOr::T(Schema::Object(values))) =
                labels.additional_properties.as_deref_mut().expect("labels map strings to strings")
            {
                values.max_length = Some(MAX_LABEL_VALUE_BYTES);
                values.pattern = Some(NO_CONTROL.to_owned());
            }
        }
        let problem = |description: &str| {
            let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build();
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(mission_api::PROBLEM_CONTENT_TYPE, content)
                    .build(),
            )
        };
        for (path, item) in openapi.paths.paths.iter_mut() {
            let public = PUBLIC_OPERATIONS.contains(&path.as_str());
            let operations = [
                (HttpMethod::Get, &mut item.get),
                (HttpMethod::Put, &mut item.put),
                (HttpMethod::Post, &mut item.post),
                (HttpMethod::Delete, &mut item.delete),
                (HttpMethod::Patch, &mut item.patch),
            ];
            for (method, operation) in operations {
                let Some(operation) = operation else { continue };
                for parameter in operation.parameters.iter_mut().flatten() {
                    if parameter.name == "path"
                        && let Some(RefOr::T(Schema::Object(path))) = &mut parameter.schema
                    {
                        path.max_length = Some(mission_api::paths::MAX_PATH_BYTES);
                        path.pattern = Some(mission_path_pattern());
                    }
                }
                let within =
                    |place: ParameterIn| operation.parameters.iter().flatten().any(|p| p.parameter_in == place);
                // A raw body may be empty (an empty file), and is bytes: a binary string, not
                // the array of integers a `Vec<u8>` would say.
                if let Some(body) = &mut operation.request_body
                    && body.content.keys().all(|media_type| media_type == "application/octet-stream")
                {
                    body.required = Some(utoipa::openapi::Required::False);
                    for content in body.content.values_mut() {
                        content.schema = Some(RefOr::T(binary_string()));
                    }
                }
                let (in_path, in_query, body) =
                    (within(ParameterIn::Path), within(ParameterIn::Query), operation.request_body.is_some());
                let json_or_none = operation
                    .request_body
                    .as_ref()
                    .is_none_or(|body| body.content.keys().all(|media_type| media_type == "application/json"));
                let idempotent = matches!(method, HttpMethod::Post) && json_or_none && !public;
                if idempotent {
                    operation.parameters.get_or_insert_with(Vec::new).push(idempotency_key_parameter());
                }
                let changes = !matches!(method, HttpMethod::Get);
                let mut add = Vec::new();
                if public {
                    operation.security = Some(Vec::new());
                } else {
                    add.push(("401", "no valid bearer token"));
                }
                if in_path || in_query || body {
                    add.push(("400", "a malformed parameter or body"));
                }
                if in_path {
                    add.push(("404", "no such resource, or not one the caller may see"));
                }
                if !public && (in_path || changes) {
                    add.push(("403", "the caller may not do this"));
                }
                if idempotent {
                    add.push(("400", "a malformed parameter or body"));
                    add.push(("409", "a request with this Idempotency-Key still runs"));
                    add.push(("422", "this Idempotency-Key was used for another request"));
                }
                if body {
                    add.push(("413", "the body is over its limit"));
                    add.push(("415", "the body is not of the documented content type"));
                }
                let responses = &mut operation.responses.responses;
                for (status, description) in add {
                    responses.entry(status.to_owned()).or_insert_with(|| problem(description));
                }
                // Errors come as problem+json, whatever the annotations said.
                for (status, response) in responses.iter_mut() {
                    if let (true, RefOr::T(response)) = (status.as_str() >= "400", response)
                        && let Some(content) = response.content.shift_remove("application/json")
                    {
                        response.content.insert(mission_api::PROBLEM_CONTENT_TYPE.to_owned(), content);
                    }
                }
            }
        }
    }
}

/// The optional `Idempotency-Key` header of creating requests (see [`crate::http::idempotency`]).
fn idempotency_key_parameter() -> utoipa::openapi::path::Parameter {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(crate::http::idempotency::MAX_KEY_CHARS))
        .pattern(Some("^[!-~]+$"));
    ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(utoipa::openapi::Required::False)
        .description(Some(
            "Makes the request run at most once: a retry with the same key and request gets the first answer \
             again (`Idempotent-Replayed: true`) for a day. A UUID makes a good key.",
        ))
        .schema(Some(schema))
        .build()
}

/// The whole application router.
pub fn router(app: AppState) -> Router {
    let api = Router::new()
        .route("/missions", get(missions::list).post(missions::create))
        .route("/missions/{id}", get(missions::get).patch(missions::update).delete(missions::delete))
        .route("/missions/{id}/args", put(missions::set_args))
        .route("/missions/{id}/files", get(files::list))
        .route(
            "/missions/{id}/files/{*path}",
            get(files::download).put(files::upload).delete(files::delete).layer(DefaultBodyLimit::disable()),
        )
        .route("/missions/{id}/archive", get(archives::mission))
        .route("/missions/{id}/jobs", post(jobs::run))
        .route("/missions/{id}/jobs/rerun-failed", post(jobs::rerun_failed))
        .route("/missions/{id}/job-arrays", post(jobs::run_array))
        .route("/job-arrays/{id}", get(jobs::get_array))
        .route("/job-arrays/{id}/stop", post(jobs::stop_array))
        .route("/jobs", get(jobs::list).post(jobs::submit_batch))
        .route("/jobs/events", get(jobs::events))
        .route("/jobs/usage", get(jobs::usage))
        .route("/events", get(events::stream))
        .route("/jobs/{id}", get(jobs::get).patch(jobs::update))
        .route("/jobs/{id}/stop", post(jobs::stop))
        .route("/jobs/{id}/hold", post(jobs::hold))
        .route("/jobs/{id}/release", post(jobs::release))
        .route("/jobs/{id}/requeue", post(jobs::requeue))
        .route("/jobs/{id}/shell", get(crate::http::shell::open_shell))
        .route("/jobs/{id}/rerun", post(jobs::rerun))
        .route("/jobs/{id}/logs", get(jobs::logs))
        .route("/jobs/{id}/results", get(jobs::results))
        .route("/jobs/{id}/archive", get(archives::results))
        .route("/jobs/{id}/results/{*path}", get(jobs::result))
        .route("/lz/connect", post(lz::connect))
        .route("/lz/heartbeat", post(lz::heartbeat))
        .route("/lz/reports", post(lz::reports))
        .route("/lz/demand", get(lz::demand))
        .route("/lz/pilots", post(lz::register_pilot))
        .route("/lz/pilots/{id}", axum::routing::delete(lz::remove_pilot))
        .route("/lz/jobs/{id}/logs/{stream}", post(lz::append_log))
        .route("/lz/jobs/{id}/shell", get(crate::http::shell::open_from_node))
        .route("/lz/jobs/{id}/files/{*path}", get(lz::input_file))
        .route("/lz/jobs/{id}/image", get(lz::job_image))
        .route("/lz/jobs/{id}/inputs/{n}", get(lz::task_input_listing))
        .route("/lz/jobs/{id}/inputs/{n}/content", get(lz::task_input_content))
        .route("/lz/jobs/{id}/inputs/{n}/files/{*path}", get(lz::task_input_file))
        .route(TASK_OUTPUT_ROUTE, put(lz::task_output_content).layer(DefaultBodyLimit::disable()))
        .route("/lz/jobs/{id}/outputs/{n}/files/{*path}", put(lz::task_output_file).layer(DefaultBodyLimit::disable()))
        .route("/lz/jobs/{id}/session", post(lz::session_ready))
        .route("/lz/jobs/{id}/session/ending", post(lz::session_ending))
        .route("/lz/tunnel", get(crate::http::sessions::agent_tunnel))
        .route("/lz/jobs/{id}/results/{*path}", put(lz::upload_result).layer(DefaultBodyLimit::disable()))
        .route("/cargo-bays", get(cargo_bays::list).post(cargo_bays::create))
        .route("/cargo-bays/{id}", get(cargo_bays::get).delete(cargo_bays::delete))
        .route("/images", get(images::list).post(images::import).layer(DefaultBodyLimit::disable()))
        .route("/images/references", post(images::register_reference))
        .route("/images/{id}", get(images::get).delete(images::delete))
        .route("/webhooks", get(webhooks::list).post(webhooks::create))
        .route("/webhooks/{id}", get(webhooks::get).delete(webhooks::delete))
        .route("/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route("/stations", get(stations::list).post(stations::create))
        .route("/stations/{id}", get(stations::get).patch(stations::update).delete(stations::delete))
        .route("/stations/{id}/members", get(stations::members))
        .route("/stations/{id}/members/{user}", put(stations::add_member).delete(stations::remove_member))
        .route("/stations/{id}/lzs", get(stations::landing_zones).post(stations::register_landing_zone))
        .route("/stations/{id}/lzs/{lz_id}", axum::routing::delete(stations::remove_landing_zone))
        .route("/projects", get(projects::list).post(projects::create))
        .route("/projects/{id}", get(projects::get).patch(projects::update).delete(projects::delete))
        .route("/projects/{id}/members", get(projects::members))
        .route("/projects/{id}/members/{user}", put(projects::set_member).delete(projects::remove_member))
        .route("/projects/{id}/limits", get(projects::limits))
        .route("/projects/{id}/limits/{station_id}", put(projects::set_limits).delete(projects::delete_limits))
        .route("/projects/{id}/budget", get(projects::budget).put(projects::set_budget).delete(projects::delete_budget))
        .route("/usage", get(projects::usage))
        .route("/audit", get(audit::list))
        .route("/mission-types", get(mission_types::list))
        .route("/mission-types/{id}", get(mission_types::get))
        .route("/mission-types/{id}/settings", get(mission_types::settings))
        .route("/auth-config", get(meta::auth_config))
        .route("/me", get(meta::me))
        .route("/openapi.json", get(meta::openapi));
    let mut root = Router::new()
        .nest(mission_api::API_PREFIX, api)
        .nest(galileo::PREFIX, galileo::router())
        .nest(mission_api::tes::TES_PREFIX, tes::router())
        .route("/sessions/{job_id}", axum::routing::any(crate::http::sessions::to_root))
        .route("/sessions/{job_id}/", axum::routing::any(crate::http::sessions::proxy))
        .route("/sessions/{job_id}/{*rest}", axum::routing::any(crate::http::sessions::proxy))
        .route("/healthz", get(meta::healthz))
        .route("/readyz", get(meta::readyz))
        .route("/metrics", get(meta::metrics))
        .merge(crate::http::console::router());
    if app.idp.is_some() {
        root = root.merge(crate::http::idp::routes::router());
    }
    root.fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(app.clone(), crate::http::idempotency::once_per_key))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY_BYTES))
        .layer(axum::middleware::from_fn(refuse_announced_oversize))
        .layer(axum::middleware::from_fn(crate::http::deprecation::announce))
        .layer(axum::middleware::from_fn_with_state(
            app.config.connection_limits.body_idle_timeout,
            crate::http::serve::body_idle_timeout,
        ))
        .layer(axum::middleware::from_fn_with_state(app.clone(), crate::http::metrics::track))
        .layer(axum::middleware::from_fn(crate::http::client_versions::check))
        .layer(axum::middleware::from_fn(crate::http::audit::request_scope))
        // A session's own host serves that session alone, before anything else looks at it.
        .layer(axum::middleware::from_fn_with_state(app.clone(), crate::http::sessions::on_own_origin))
        .with_state(app)
}

/// A stream fed by a task: `produce` sends items until it returns; dropping the stream stops it
/// at its next send.
fn async_stream<F, Fut>(produce: F) -> impl futures_util::Stream<Item = Bytes> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(produce(tx));
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

/// Answers 413 at once when a request announces (`Content-Length`) a body over the route's
/// limit, instead of reading it first. File uploads (`PUT …/{*path}`, and the galileo client's
/// `POST …/projects/{id}/files`) have the file-size limit, and image imports (`POST /images`) the
/// image-size limit, which their handlers check the same way; every other body is at most
/// [`MAX_JSON_BODY_BYTES`].
async fn refuse_announced_oversize(request: Request, next: axum::middleware::Next) -> axum::response::Response {
    let matched = request.extensions().get::<axum::extract::MatchedPath>().map(|p| p.as_str());
    // A session's app takes what it takes: its bodies stream through, never held here.
    let session = matched.is_some_and(|p| p.starts_with("/sessions/"));
    let upload = session
        || match *request.method() {
            axum::http::Method::PUT => matched.is_some_and(|p| {
                p.ends_with("/{*path}") || p.strip_prefix(mission_api::API_PREFIX) == Some(TASK_OUTPUT_ROUTE)
            }),
            axum::http::Method::POST => matched.is_some_and(|p| p == galileo::UPLOAD_ROUTE || p == "/api/v1/images"),
            _ => false,
        };
    let announced =
        request.headers().get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match announced {
        Some(length) if !upload && length > MAX_JSON_BODY_BYTES as u64 => ApiError::too_large(format!(
            "request bodies are limited to {MAX_JSON_BODY_BYTES} bytes here; this one announces {length}"
        ))
        .into_response(),
        _ => next.run(request).await,
    }
}

/// Where an agent uploads a TES task's file output: a body as large as a file.
const TASK_OUTPUT_ROUTE: &str = "/lz/jobs/{id}/outputs/{n}/content";

async fn no_route(request: Request) -> impl IntoResponse {
    ApiError::no_route(request.uri().path())
}

async fn method_not_allowed(request: Request) -> impl IntoResponse {
    ApiError::method_not_allowed(request.method().as_str(), request.uri().path())
}

#[cfg(test)]
mod tests {
    use super::without_doc_links;

    #[test]
    fn doc_links_read_as_code_and_limits_as_their_values() {
        assert_eq!(
            without_doc_links("at most [`MAX_ATTEMPTS`] tries (see [`crate::RunJob::retry`]); [`oops"),
            "at most 20 tries (see `retry`); [`oops"
        );
        assert_eq!(without_doc_links("no links"), "no links");
    }
}
