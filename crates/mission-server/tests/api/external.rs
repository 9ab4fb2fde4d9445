//! An external identity provider (Auth0-style and others): JWKS discovery and fallback, RSA and
//! EC keys mixed, `aud` as string or array, `iss` with or without a trailing slash, `typ` JWT or
//! at+jwt, key rotation, and first-sight provisioning.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mission_server::AuthMode;
use mission_testkit::TestServer;

use crate::{http, problem};

const AUDIENCE: &str = "https://api.mission.example";
const JWKS: &str = include_str!("fixtures/jwks.json");

/// A provider double: serves a JWKS (which tests can change) and, when `discovery`, an OIDC
/// discovery document pointing at a non-default JWKS path.
struct Provider {
    url: String,
    jwks: Arc<Mutex<serde_json::Value>>,
}

async fn spawn_provider(discovery: bool, keys: &[&str]) -> Provider {
    let all: serde_json::Value = serde_json::from_str(JWKS).unwrap();
    let chosen: Vec<_> = all["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| keys.contains(&k["kid"].as_str().unwrap()))
        .cloned()
        .collect();
    let jwks = Arc::new(Mutex::new(serde_json::json!({ "keys": chosen })));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let serve_jwks =
        |State(j): State<Arc<Mutex<serde_json::Value>>>| async move { axum::Json(j.lock().unwrap().clone()) };
    let mut app = Router::new();
    if discovery {
        let base = url.clone();
        app = app
            .route(
                "/.well-known/openid-configuration",
                get(move || async move {
                    axum::Json(serde_json::json!({
                        "issuer": base,
                        "jwks_uri": format!("{base}keys"),
                        "authorization_endpoint": format!("{base}authorize"),
                        "token_endpoint": format!("{base}oauth/token"),
                    }))
                }),
            )
            .route("/keys", get(serve_jwks))
            .merge(authorization_code_grant(&url));
    } else {
        app = app.route("/.well-known/jwks.json", get(serve_jwks));
    }
    let app = app.with_state(jwks.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Provider { url, jwks }
}

/// The provider's side of the authorization-code flow with PKCE, approving at once: `/authorize`
/// remembers the challenge and sends the browser back with a code; `/oauth/token` gives an
/// access token for that code only to the verifier of that challenge, from the same client and
/// redirect address.
fn authorization_code_grant(issuer: &str) -> Router<Arc<Mutex<serde_json::Value>>> {
    type Asked = Arc<Mutex<Option<std::collections::HashMap<String, String>>>>;
    let asked: Asked = Arc::default();
    let remember = asked.clone();
    let issuer = issuer.to_owned();
    Router::new()
        .route(
            "/authorize",
            get(move |axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>| {
                let back = format!("{}?code=the-code&state={}", q["redirect_uri"], q["state"]);
                *remember.lock().unwrap() = Some(q);
                async move { axum::response::Redirect::to(&back) }
            }),
        )
        .route(
            "/oauth/token",
            axum::routing::post(move |axum::Form(f): axum::Form<std::collections::HashMap<String, String>>| {
                use base64::Engine as _;
                let asked = asked.lock().unwrap().clone().unwrap_or_default();
                let digest = ring::digest::digest(&ring::digest::SHA256, f["code_verifier"].as_bytes());
                let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
                let good = f["grant_type"] == "authorization_code"
                    && f["code"] == "the-code"
                    && asked.get("code_challenge_method").map(String::as_str) == Some("S256")
                    && asked.get("code_challenge") == Some(&challenge)
                    && asked.get("client_id") == f.get("client_id")
                    && asked.get("redirect_uri") == f.get("redirect_uri")
                    && asked.get("audience").map(String::as_str) == Some(AUDIENCE);
                let answer = if good {
                    let token =
                        sign(Algorithm::RS256, "rsa-1", "JWT", claims(&issuer, AUDIENCE.into(), "auth0|console", 600));
                    (
                        axum::http::StatusCode::OK,
                        axum::Json(serde_json::json!({ "access_token": token, "token_type": "Bearer" })),
                    )
                } else {
                    (axum::http::StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({ "error": "invalid_grant" })))
                };
                async move { answer }
            }),
        )
}

async fn spawn_server(provider: &Provider) -> TestServer {
    let auth_url: url::Url = provider.url.parse().unwrap();
    TestServer::spawn_with(move |c| {
        c.auth = AuthMode::External { auth_url };
        c.audience = AUDIENCE.into();
        c.client_id = "auth0-client-id".into();
        c.jwks_min_refetch = Duration::ZERO;
    })
    .await
}

fn sign(alg: Algorithm, kid: &str, typ: &str, claims: serde_json::Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(include_bytes!("fixtures/rsa-private.pem")).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(include_bytes!("fixtures/ec-private.pem")).unwrap(),
        Algorithm::HS256 => EncodingKey::from_secret(b"secret"),
        _ => unreachable!(),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    header.typ = Some(typ.into());
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

/// An RS256 token whose header names a critical extension (`crit`), correctly signed.
fn with_crit(claims: &serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let header = serde_json::json!({ "alg": "RS256", "kid": "rsa-1", "typ": "JWT", "crit": ["exp-ext"], "exp-ext": 1 });
    let message = format!("{}.{}", b64(&header), b64(claims));
    let key = EncodingKey::from_rsa_pem(include_bytes!("fixtures/rsa-private.pem")).unwrap();
    format!("{message}.{}", jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::RS256).unwrap())
}

fn claims(iss: &str, aud: serde_json::Value, sub: &str, exp_in: i64) -> serde_json::Value {
    let now = chrono::Utc::now().timestamp();
    serde_json::json!({ "iss": iss, "aud": aud, "sub": sub, "iat": now, "exp": now + exp_in, "scope": "openid" })
}

async fn me(server: &TestServer, token: &str) -> reqwest::Response {
    http().get(format!("{}/api/v1/me", server.url)).bearer_auth(token).send().await.unwrap()
}

#[tokio::test]
async fn auth0_style_and_other_providers_are_accepted() {
    let provider = spawn_provider(true, &["ec-1", "hmac-ignored", "rsa-1"]).await;
    let server = spawn_server(&provider).await;
    let with_slash = provider.url.clone();
    let without_slash = provider.url.trim_end_matches('/').to_owned();

    // Auth0: RS256, typ JWT, iss with a trailing slash, aud an array.
    let auth0 = sign(
        Algorithm::RS256,
        "rsa-1",
        "JWT",
        claims(&with_slash, serde_json::json!([AUDIENCE, format!("{without_slash}/userinfo")]), "auth0|abc", 600),
    );
    let response = me(&server, &auth0).await;
    assert_eq!(response.status(), 200);
    let user: mission_api::User = response.json().await.unwrap();
    assert_eq!(user.username, "auth0|abc");
    assert!(!user.admin);
    // Seen again: the same user, not a second one.
    let again: mission_api::User = me(&server, &auth0).await.json().await.unwrap();
    assert_eq!(again.user_id, user.user_id);

    // Keycloak-like: ES256, typ at+jwt, iss without the slash, aud a string; works with the SDK.
    let other = sign(Algorithm::ES256, "ec-1", "at+jwt", claims(&without_slash, AUDIENCE.into(), "kc-user-7", 600));
    let client = mission_client::Client::with_access_token(&server.url, &other).unwrap();
    assert_eq!(client.whoami().await.unwrap().username, "kc-user-7");
    let mission = client
        .create_mission(&mission_client::CreateMission { name: "from keycloak".into(), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(mission.user_id, client.whoami().await.unwrap().user_id);

    // The server tells clients where to sign in.
    let config: mission_api::AuthConfig =
        http().get(format!("{}/api/v1/auth-config", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(config.auth_url, without_slash);
    assert_eq!(config.audience, AUDIENCE);
    assert_eq!(config.client_id, "auth0-client-id");
    // The built-in provider is off.
    assert_eq!(http().post(format!("{}/oauth/device/code", server.url)).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn bad_tokens_are_401() {
    let provider = spawn_provider(false, &["ec-1", "hmac-ignored", "rsa-1"]).await;
    let server = spawn_server(&provider).await;
    let iss = provider.url.clone();
    let cases = [
        (
            "wrong audience",
            sign(Algorithm::RS256, "rsa-1", "JWT", claims(&iss, "other-api".into(), "u", 600)),
            "audience",
        ),
        ("expired", sign(Algorithm::RS256, "rsa-1", "JWT", claims(&iss, AUDIENCE.into(), "u", -600)), "expired"),
        (
            "wrong issuer",
            sign(Algorithm::RS256, "rsa-1", "JWT", claims("https://evil.example/", AUDIENCE.into(), "u", 600)),
            "issued by",
        ),
        ("unknown key", sign(Algorithm::RS256, "rsa-9", "JWT", claims(&iss, AUDIENCE.into(), "u", 600)), "key"),
        (
            "symmetric key",
            sign(Algorithm::HS256, "hmac-ignored", "JWT", claims(&iss, AUDIENCE.into(), "u", 600)),
            "algorithm",
        ),
        (
            "key of another type",
            sign(Algorithm::RS256, "ec-1", "JWT", claims(&iss, AUDIENCE.into(), "u", 600)),
            "not valid",
        ),
        ("garbage", "not.a.jwt".to_owned(), "JWT"),
        (
            "not valid yet",
            sign(Algorithm::RS256, "rsa-1", "JWT", {
                let mut c = claims(&iss, AUDIENCE.into(), "u", 7200);
                c["nbf"] = (chrono::Utc::now().timestamp() + 3600).into();
                c
            }),
            "not valid yet",
        ),
        (
            "an ID token",
            sign(Algorithm::RS256, "rsa-1", "id_token+jwt", claims(&iss, AUDIENCE.into(), "u", 600)),
            "typ",
        ),
        ("critical extensions", with_crit(&claims(&iss, AUDIENCE.into(), "u", 600)), "crit"),
    ];
    for (case, token, needle) in cases {
        let (status, body) = problem(me(&server, &token).await).await;
        assert_eq!(status, 401, "{case}");
        assert!(body.detail.contains(needle), "{case}: {}", body.detail);
    }
    // A forged signature: a valid token with its signature swapped for another token's.
    let good = sign(Algorithm::RS256, "rsa-1", "JWT", claims(&iss, AUDIENCE.into(), "u", 600));
    let other = sign(Algorithm::RS256, "rsa-1", "JWT", claims(&iss, AUDIENCE.into(), "admin", 600));
    let forged = format!("{}.{}", other.rsplit_once('.').unwrap().0, good.rsplit_once('.').unwrap().1);
    assert_eq!(me(&server, &forged).await.status(), 401);
}

#[tokio::test]
async fn a_rotated_key_is_fetched_on_first_sight() {
    let provider = spawn_provider(true, &["ec-1"]).await;
    let server = spawn_server(&provider).await;
    let iss = provider.url.clone();
    let ec = sign(Algorithm::ES256, "ec-1", "JWT", claims(&iss, AUDIENCE.into(), "rot", 600));
    assert_eq!(me(&server, &ec).await.status(), 200);
    let rsa = sign(Algorithm::RS256, "rsa-1", "JWT", claims(&iss, AUDIENCE.into(), "rot", 600));
    assert_eq!(me(&server, &rsa).await.status(), 401, "not published yet");
    // The provider rotates: it now publishes the RSA key too.
    let all: serde_json::Value = serde_json::from_str(JWKS).unwrap();
    provider.jwks.lock().unwrap()["keys"].as_array_mut().unwrap().push(all["keys"][2].clone());
    assert_eq!(me(&server, &rsa).await.status(), 200);
}

#[tokio::test]
async fn the_console_signs_in_through_the_provider_with_pkce() {
    let provider = spawn_provider(true, &["rsa-1"]).await;
    let server = spawn_server(&provider).await;

    // The flow's guards, over raw HTTP: the provider is asked for S256 PKCE, and the way back is
    // taken only with the state this browser was given.
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let started = no_redirects.get(format!("{}/sign-in/start?next=/jobs", server.url)).send().await.unwrap();
    assert_eq!(started.status(), 303);
    let location = url::Url::parse(started.headers()[reqwest::header::LOCATION].to_str().unwrap()).unwrap();
    assert!(location.as_str().starts_with(&format!("{}authorize?", provider.url)), "{location}");
    let asked: std::collections::HashMap<_, _> = location.query_pairs().into_owned().collect();
    assert_eq!(asked["code_challenge_method"], "S256");
    assert_eq!(asked["redirect_uri"], format!("{}/sign-in/callback", server.url));
    assert_eq!(asked["client_id"], "auth0-client-id");
    let flow = started.headers()[reqwest::header::SET_COOKIE].to_str().unwrap();
    assert!(flow.contains("HttpOnly") && flow.contains("Path=/sign-in"), "{flow}");
    let flow = flow.split(';').next().unwrap().to_owned();
    let back = |query: String, cookie: Option<&str>| {
        let request = no_redirects.get(format!("{}/sign-in/callback?{query}", server.url));
        match cookie {
            Some(c) => request.header(reqwest::header::COOKIE, c.to_owned()),
            None => request,
        }
    };
    let state = &asked["state"];
    assert_eq!(back(format!("code=the-code&state={state}"), None).send().await.unwrap().status(), 403, "no cookie");
    assert_eq!(back("code=the-code&state=forged".into(), Some(&flow)).send().await.unwrap().status(), 403);
    let denied = back(format!("error=access_denied&error_description=nope&state={state}"), Some(&flow));
    let denied = denied.send().await.unwrap();
    assert_eq!(denied.status(), 401);
    assert!(denied.text().await.unwrap().contains("did not sign you in: nope"));
    let stolen = back(format!("code=the-code&state={state}"), Some(&flow)).send().await.unwrap();
    assert_eq!(stolen.status(), 401, "the provider saw no /authorize with this verifier's challenge");

    // A person in a browser: the sign-in page, the provider, and back where they started.
    let Some(browser) = mission_testkit::Browser::start().await else { return };
    browser.goto(&format!("{}/jobs?status=running", server.url)).await;
    browser.click("#sign-in-external").await;
    browser.wait_for_text("h1", "Jobs").await;
    assert!(browser.current_url().await.ends_with("/jobs?status=running"));
    assert!(browser.text("form.who").await.contains("auth0|console"));
    browser.close().await;
}

#[tokio::test]
async fn project_memberships_follow_the_group_claim_at_each_sign_in() {
    let provider = spawn_provider(true, &["rsa-1"]).await;
    let auth_url: url::Url = provider.url.parse().unwrap();
    let server = TestServer::spawn_with(move |c| {
        c.auth = AuthMode::External { auth_url };
        c.audience = AUDIENCE.into();
        c.jwks_min_refetch = Duration::ZERO;
        c.project_groups = Some(mission_server::ProjectGroups { claim: "groups".into(), prefix: "mission:".into() });
    })
    .await;
    let store = &server.app.store;
    let (bio, astro, chem) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    for (id, name) in [(bio, "bio"), (astro, "astro"), (chem, "chem")] {
        store.insert_project(id, name, "", mission_store::now()).await.unwrap();
    }
    let token = |groups: serde_json::Value| {
        let mut claims = claims(&provider.url, serde_json::json!(AUDIENCE), "oidc|ada", 600);
        claims["groups"] = groups;
        // A new token each time (its iat differs), as each sign-in or refresh gives.
        claims["jti"] = serde_json::json!(uuid::Uuid::new_v4().to_string());
        sign(Algorithm::RS256, "rsa-1", "JWT", claims)
    };
    let url = server.url.clone();
    let roles = |token: String| {
        let url = url.clone();
        async move {
            let projects: mission_api::ProjectPage = http()
                .get(format!("{url}/api/v1/projects"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let mut roles: Vec<(String, String)> = projects
                .projects
                .into_iter()
                .filter(|p| p.personal.is_none())
                .map(|p| (p.name, p.role.map(|r| r.to_string()).unwrap_or_default()))
                .collect();
            roles.sort();
            roles
        }
    };
    let owned =
        |pairs: &[(&str, &str)]| pairs.iter().map(|(p, r)| ((*p).to_owned(), (*r).to_owned())).collect::<Vec<_>>();

    // Groups with the prefix name projects (a role after a colon); others, and unknown projects,
    // are passed over.
    let first = token(serde_json::json!(["mission:bio", "mission:astro:manager", "mission:nowhere", "staff"]));
    assert_eq!(roles(first).await, owned(&[("astro", "manager"), ("bio", "member")]));
    let ada = store.user_by_external_sub("oidc|ada").await.unwrap().unwrap().user_id;

    // An admin makes ada a viewer of chem by hand: the claim never takes that away.
    store.set_project_member(chem, ada, mission_api::ProjectRole::Viewer, mission_store::now()).await.unwrap();
    // The next sign-in's claim drops bio and makes astro a viewer's: so it is, chem stays.
    let second = token(serde_json::json!("mission:astro:viewer staff"));
    assert_eq!(roles(second).await, owned(&[("astro", "viewer"), ("chem", "viewer")]));
    // Without the claim, what it gave ends.
    let third = token(serde_json::json!(null));
    assert_eq!(roles(third).await, owned(&[("chem", "viewer")]));
}
