//! The built-in identity provider: RFC 8628 device flow, refresh, revocation, token file.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use mission_client::auth::token_file;
use mission_client::{Client, Error, LoginOptions, SignInError};
use mission_testkit::{PASSWORD, TestServer};

use crate::http;

async fn token_poll(server: &TestServer, device_code: &str) -> (u16, serde_json::Value) {
    let form = [
        ("grant_type", mission_api::DEVICE_CODE_GRANT),
        ("device_code", device_code),
        ("client_id", mission_api::DEFAULT_CLIENT_ID),
    ];
    let response = http().post(format!("{}/oauth/token", server.url)).form(&form).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn full_device_flow_through_login_with_token_file() {
    let server = TestServer::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    let (prompt, seen) = TestServer::recording_prompt();
    let options = LoginOptions { token_file: Some(path.clone()), prompt, ..Default::default() };

    // The prompt records the code; approve it from another task while the SDK polls.
    let approver = {
        let url = server.url.clone();
        let seen = seen.clone();
        tokio::spawn(async move {
            let code = loop {
                if let Some(a) = seen.lock().unwrap().clone() {
                    break a;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert_eq!(code.verification_uri, format!("{url}/activate"));
            assert_eq!(
                code.verification_uri_complete.as_deref(),
                Some(format!("{url}/activate?user_code={}", code.user_code).as_str())
            );
            let form = [
                ("user_code", code.user_code.as_str()),
                ("username", "alice"),
                ("password", PASSWORD),
                ("action", "approve"),
            ];
            let page = http().post(format!("{url}/activate")).form(&form).send().await.unwrap();
            assert_eq!(page.status(), 200);
            assert!(page.text().await.unwrap().contains("Device approved"));
        })
    };
    let client =
        tokio::time::timeout(Duration::from_secs(30), Client::login(&server.url, options)).await.unwrap().unwrap();
    approver.await.unwrap();
    assert_eq!(client.whoami().await.unwrap().username, "alice");

    // The token file: refresh_token and a local expiry one hour ahead, mode 0600.
    let stored = token_file::read(&path).unwrap().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let raw: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(raw.as_object().unwrap().len(), 2);
    let expiry = stored.expires_at().expect("expires_in parses as %Y-%m-%d %H:%M:%S.%f");
    let ahead = expiry - chrono::Local::now();
    assert!(ahead > chrono::Duration::seconds(3500) && ahead <= chrono::Duration::seconds(3600), "{ahead}");
    assert!(regex_like_timestamp(&stored.expires_in), "{}", stored.expires_in);

    // initialize with the file refreshes instead of running the device flow again.
    let auth = server.device_auth().token_file(&path);
    let tokens = auth.initialize().await.unwrap();
    assert_eq!(tokens.refresh_token, stored.refresh_token);
    assert!(Client::with_access_token(&server.url, &tokens.access_token).unwrap().whoami().await.is_ok());
}

fn regex_like_timestamp(s: &str) -> bool {
    // YYYY-MM-DD HH:MM:SS.ffffff
    let b = s.as_bytes();
    b.len() == 26
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b' ',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            _ => c.is_ascii_digit(),
        })
}

#[tokio::test]
async fn pending_denied_replayed_and_wrong_password() {
    let server = TestServer::spawn().await;
    let auth = server.device_auth();

    // Pending until approved; a wrong password approves nothing.
    let pending = auth.start().await.unwrap();
    let code = pending.authorization().clone();
    assert_eq!(code.expires_in, Some(900));
    let (status, body) = token_poll(&server, &code.device_code).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("authorization_pending")));
    let (status, page) = server.activate(&code.user_code, "alice", "wrong password", "approve").await;
    assert_eq!(status, 400);
    assert!(page.contains("Wrong username or password"), "{page}");
    let (status, page) = server.activate(&code.user_code, "nobody", PASSWORD, "approve").await;
    assert_eq!(status, 400);
    assert!(page.contains("Wrong username or password"));
    let (_, body) = token_poll(&server, &code.device_code).await;
    assert_eq!(body["error"], "authorization_pending");

    // Approve (the code typed in lower case with a space), get tokens once; a replay is refused.
    let typed = code.user_code.to_lowercase().replace('-', " ");
    let (status, _) = server.activate(&typed, "alice", PASSWORD, "approve").await;
    assert_eq!(status, 200);
    let (status, body) = token_poll(&server, &code.device_code).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    assert!(body["refresh_token"].is_string());
    let (status, body) = token_poll(&server, &code.device_code).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")));

    // Denying needs the account's password too; a denied code ends the SDK's polling with a
    // clear error.
    let pending = auth.start().await.unwrap();
    let (status, page) = server.activate(&pending.authorization().user_code, "", "", "deny").await;
    assert_eq!(status, 400);
    assert!(page.contains("Wrong username or password"), "{page}");
    let (status, page) = server.activate(&pending.authorization().user_code, "alice", PASSWORD, "deny").await;
    assert_eq!(status, 200);
    assert!(page.contains("Request denied"));
    let err = auth.finish(pending).await.unwrap_err();
    assert!(matches!(err, Error::SignIn(SignInError::Denied)), "{err:?}");

    // An unknown code is reported on the page.
    let (status, page) = server.activate("BCDF-GHJK", "alice", PASSWORD, "approve").await;
    assert_eq!(status, 400);
    assert!(page.contains("unknown, expired or already used"));
}

#[tokio::test]
async fn expired_codes_stop_polling() {
    // Nobody signs in first: a loaded machine could take longer than the code lives.
    let server = TestServer::spawn_signed_out_with(|c| c.device_code_ttl = Duration::from_secs(1)).await;
    let auth = server.device_auth();
    let pending = auth.start().await.unwrap();
    let device_code = pending.authorization().device_code.clone();
    let started = std::time::Instant::now();
    let err = auth.finish(pending).await.unwrap_err();
    assert!(matches!(err, Error::SignIn(SignInError::Expired)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "stopped at the code's expiry, not later");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, body) = token_poll(&server, &device_code).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("expired_token")));
}

#[tokio::test]
async fn polling_faster_than_the_interval_gets_slow_down() {
    let server = TestServer::spawn_with(|c| c.device_poll_interval = 2).await;
    let pending = server.device_auth().start().await.unwrap();
    let code = &pending.authorization().device_code;
    assert_eq!(pending.authorization().interval, 2);
    let (_, first) = token_poll(&server, code).await;
    assert_eq!(first["error"], "authorization_pending");
    let (status, second) = token_poll(&server, code).await;
    assert_eq!((status, second["error"].as_str()), (400, Some("slow_down")));
}

#[tokio::test]
async fn refresh_keeps_the_refresh_token_and_revocation_ends_it() {
    let server = TestServer::spawn().await;
    let auth = server.device_auth();
    let pending = auth.start().await.unwrap();
    server.activate(&pending.authorization().user_code, "alice", PASSWORD, "approve").await;
    let tokens = auth.finish(pending).await.unwrap();

    let refreshed = auth.refresh(&tokens.refresh_token).await.unwrap();
    assert_eq!(refreshed.refresh_token, tokens.refresh_token);
    assert!(Client::with_access_token(&server.url, &refreshed.access_token).unwrap().whoami().await.is_ok());

    // Wrong client id, garbage token: invalid_grant.
    let other_client = server.device_auth().client_id("someone-else");
    let err = other_client.refresh(&tokens.refresh_token).await.unwrap_err();
    assert!(matches!(&err, Error::SignIn(SignInError::Refused { error, .. }) if error == "invalid_grant"), "{err:?}");
    let err = auth.refresh("not-a-token").await.unwrap_err();
    assert!(matches!(&err, Error::SignIn(SignInError::Refused { status: 400, error, .. }) if error == "invalid_grant"));

    // logout revokes: the refresh token stops working.
    let client = Client::with_tokens(&server.url, tokens.clone(), auth.clone()).unwrap();
    client.logout().await.unwrap();
    let err = auth.refresh(&tokens.refresh_token).await.unwrap_err();
    assert!(matches!(&err, Error::SignIn(SignInError::Refused { error, .. }) if error == "invalid_grant"));
}

#[tokio::test]
async fn client_renews_an_expired_access_token_by_itself() {
    let server = TestServer::spawn_with(|c| c.access_token_ttl = Duration::from_secs(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    let auth = server.device_auth().token_file(&path);
    let pending = auth.start().await.unwrap();
    server.activate(&pending.authorization().user_code, "alice", PASSWORD, "approve").await;
    let tokens = auth.finish(pending).await.unwrap();
    let client = Client::with_tokens(&server.url, tokens.clone(), auth).unwrap();
    // The token's expiry is within the renewal margin, so the client refreshes before calling.
    client.whoami().await.unwrap();
    let renewed = client.tokens().await.unwrap();
    assert_ne!(renewed.access_token, tokens.access_token);
    assert_eq!(renewed.refresh_token, tokens.refresh_token);
    assert!(path.exists(), "a refresh rewrites the token file");
}

/// Posts a form to one of the provider's endpoints: status, `Retry-After`, JSON body.
async fn post_form(server: &TestServer, path: &str, body: String) -> (u16, Option<String>, serde_json::Value) {
    let r = http()
        .post(format!("{}{path}", server.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), retry_after, r.json::<serde_json::Value>().await.unwrap())
}

#[tokio::test]
async fn oauth_endpoints_refuse_bad_requests() {
    let server = TestServer::spawn().await;
    let post = |path: &'static str, body: &'static str| async {
        let (status, _, body) = post_form(&server, path, body.to_owned()).await;
        (status, body)
    };
    let (s, b) = post("/oauth/device/code", "scope=openid").await;
    assert_eq!((s, b["error"].as_str()), (400, Some("invalid_request")));
    assert!(b["error_description"].as_str().unwrap().contains("client_id"));
    let (s, b) = post("/oauth/device/code", "client_id=mission-cli&audience=someone-else").await;
    assert_eq!((s, b["error"].as_str()), (400, Some("invalid_request")));
    let (s, b) = post("/oauth/token", "client_id=x&grant_type=password").await;
    assert_eq!((s, b["error"].as_str()), (400, Some("unsupported_grant_type")));
    let (s, b) = post(
        "/oauth/token",
        "client_id=x&grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=nope",
    )
    .await;
    assert_eq!((s, b["error"].as_str()), (400, Some("invalid_grant")));
}

#[tokio::test]
async fn discovery_and_activate_page() {
    let server = TestServer::spawn().await;
    let config: serde_json::Value = http()
        .get(format!("{}/.well-known/openid-configuration", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["issuer"], server.url);
    assert_eq!(config["device_authorization_endpoint"], format!("{}/oauth/device/code", server.url));
    let jwks: serde_json::Value =
        http().get(config["jwks_uri"].as_str().unwrap()).send().await.unwrap().json().await.unwrap();
    assert_eq!(jwks["keys"][0]["kty"], "EC");
    assert_eq!(jwks["keys"][0]["alg"], "ES256");

    let page =
        http().get(format!("{}/activate?user_code=abcd-efgh%22%3E%3Cscript%3E", server.url)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(
        html.contains("name=\"username\"") && html.contains("value=\"approve\"") && html.contains("value=\"deny\"")
    );
    assert!(!html.contains("<script>"), "user input is escaped");
}

#[tokio::test]
async fn tokens_this_server_would_not_issue_are_401() {
    let server = TestServer::spawn().await;
    let me = server.client.whoami().await.unwrap();
    let jwks: serde_json::Value =
        http().get(format!("{}/.well-known/jwks.json", server.url)).send().await.unwrap().json().await.unwrap();
    let kid = jwks["keys"][0]["kid"].as_str().unwrap().to_owned();
    let now = chrono::Utc::now().timestamp();
    let claims = serde_json::json!({
        "iss": server.url, "aud": "mission-api", "sub": me.user_id, "iat": now, "exp": now + 600,
    });
    // Forged: right kid and claims, signed with a key that is not the server's.
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(kid);
    let forged_key = jsonwebtoken::EncodingKey::from_ec_pem(include_bytes!("fixtures/ec-private.pem")).unwrap();
    let forged = jsonwebtoken::encode(&header, &claims, &forged_key).unwrap();

    // Wrong audience: a real token from a second server holding this one's signing key but
    // configured for another API.
    let key = std::fs::read(server.app.config.data_dir.join("idp-signing-key.p8")).unwrap();
    let other_data = tempfile::tempdir().unwrap();
    mission_server::create_private_dir(other_data.path()).unwrap();
    std::fs::write(other_data.path().join("idp-signing-key.p8"), key).unwrap();
    let other_dir = other_data.path().to_owned();
    let other = TestServer::spawn_with(move |c| {
        c.data_dir = other_dir;
        c.audience = "another-api".into();
    })
    .await;
    let auth = other.device_auth();
    let pending = auth.start().await.unwrap();
    other.activate(&pending.authorization().user_code, "alice", PASSWORD, "approve").await;
    let other_audience = auth.finish(pending).await.unwrap().access_token;
    assert!(Client::with_access_token(&other.url, &other_audience).unwrap().whoami().await.is_ok());

    for (token, needle) in [(forged, "signature"), (other_audience, "audience"), ("e30.e30.e30".into(), "not a JWT")] {
        let response = http().get(format!("{}/api/v1/me", server.url)).bearer_auth(&token).send().await.unwrap();
        let (status, body) = crate::problem(response).await;
        assert_eq!(status, 401);
        assert!(body.detail.contains(needle), "{}", body.detail);
    }
}

#[tokio::test]
async fn guessing_at_activate_is_slowed_down() {
    let server = TestServer::spawn().await;
    let pending = server.device_auth().start().await.unwrap();
    let code = pending.authorization().user_code.clone();
    // Five failures pass as failures; the sixth makes the account, the code and the address
    // wait, and while they wait even the right password is refused unchecked.
    for _ in 0..6 {
        let (status, _) = server.activate(&code, "alice", "a guess", "approve").await;
        assert_eq!(status, 400);
    }
    let (status, page) = server.activate(&code, "alice", PASSWORD, "approve").await;
    assert_eq!(status, 429, "{page}");
    assert!(page.contains("Too many failed attempts. Wait 1 seconds"), "{page}");
    let started = std::time::Instant::now();
    let guesses = async {
        loop {
            let (status, _) = server.activate(&code, "alice", "another guess", "approve").await;
            if status != 429 {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // The wait passes, the next guess fails and doubles it.
    assert_eq!(tokio::time::timeout(Duration::from_secs(10), guesses).await.unwrap(), 400);
    assert!(started.elapsed() >= Duration::from_millis(800));
    let (status, _) = server.activate(&code, "alice", PASSWORD, "approve").await;
    assert_eq!(status, 429);

    // Unknown user codes count against the address as well.
    let server = TestServer::spawn().await;
    for i in 0..6 {
        let (status, _) = server.activate(&format!("BCDF-GHJ{i}"), "alice", PASSWORD, "approve").await;
        assert_eq!(status, 400);
    }
    let pending = server.device_auth().start().await.unwrap();
    let (status, _) = server.activate(&pending.authorization().user_code, "alice", PASSWORD, "approve").await;
    assert_eq!(status, 429);
}

#[tokio::test]
async fn device_codes_only_for_known_clients_bounded_and_rate_limited() {
    let server = TestServer::spawn_with(|c| c.sign_in_limits.device_codes_per_minute = 3).await;
    let post = |body: String| post_form(&server, "/oauth/device/code", body);
    let (status, _, body) = post("client_id=someone-else".into()).await;
    assert_eq!((status, body["error"].as_str()), (401, Some("invalid_client")));
    let (status, _, body) = post(format!("client_id=mission-cli&scope={}", "s".repeat(13_000))).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_scope")));
    // The galileo SDK's client id is known.
    let (status, _, _) = post("client_id=oDmH6Nf4DN3oILcNk7cQqBchXUfv7fpD&scope=openid".into()).await;
    assert_eq!(status, 200);
    // Three a minute (the test server's own sign-in took some): the next is refused.
    let mut granted = 0;
    let (status, retry_after, body) = loop {
        let answer = post("client_id=mission-cli".into()).await;
        if answer.0 != 200 || granted == 3 {
            break answer;
        }
        granted += 1;
    };
    assert!(granted < 3, "{granted} more granted");
    assert_eq!((status, body["error"].as_str()), (429, Some("slow_down")));
    let retry_after: u64 = retry_after.unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
}
