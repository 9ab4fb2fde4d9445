//! The `/activate` page in a real browser: headless Chromium driven over WebDriver (chromedriver)
//! opens `verification_uri_complete`, signs in and presses Approve, and the SDK's poll then gets
//! tokens.

use std::time::Duration;

use mission_testkit::{Browser, PASSWORD, TestServer};

#[tokio::test]
async fn approving_in_a_real_browser_signs_the_device_in() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::spawn().await;
    let auth = server.device_auth();
    let pending = auth.start().await.unwrap();
    let authorization = pending.authorization().clone();

    browser.goto(&authorization.verification_uri_complete.clone().unwrap()).await;
    assert_eq!(browser.title().await, "Sign in a device · Mission Compute");
    assert_eq!(browser.property("#user_code", "value").await, authorization.user_code.as_str());
    browser.type_into("#username", "alice").await;
    browser.type_into("#password", PASSWORD).await;
    browser.click("button[value=approve]").await;
    // The click may return before the POST's answer page (a PBKDF2 check away) has replaced the
    // form: wait for it.
    browser.wait_for_text("body", "Device approved").await;
    browser.screenshot("activate-approved").await;
    browser.close().await;

    let tokens = tokio::time::timeout(Duration::from_secs(20), auth.finish(pending)).await.unwrap().unwrap();
    let client = mission_client::Client::with_access_token(&server.url, &tokens.access_token).unwrap();
    assert_eq!(client.whoami().await.unwrap().username, "alice");
}
