//! Headless Chromium driven over WebDriver: Debian's `chromium` and
//! `chromium-driver` (`./scripts/test` installs them). `chromedriver` is
//! started on a free port of 127.0.0.1 for each browser and killed with it.
//! `CLARION_CHROMEDRIVER` / `CLARION_CHROMIUM` name other binaries.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Longest any one wait for the page takes.
pub const WAIT: Duration = Duration::from_secs(60);

pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// A fresh headless browser window of `width` × `height` CSS pixels.
    pub async fn start(width: u32, height: u32) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let driver_binary = std::env::var("CLARION_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let driver = Command::new(&driver_binary)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot start {driver_binary} ({err}): the console's browser tests need Debian's \
                     chromium and chromium-driver; ./scripts/test installs them"
                )
            });
        let chromium = std::env::var("CLARION_CHROMIUM").unwrap_or_else(|_| {
            ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
                .into_iter()
                .find(|path| std::path::Path::new(path).exists())
                .unwrap_or("chromium")
                .to_owned()
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--lang=en-GB",
                    format!("--window-size={width},{height}"),
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + WAIT;
        let client = loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(err) => {
                    assert!(
                        Instant::now() < deadline,
                        "chromedriver on {url} gave no session: {err}"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        Self { client, driver }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigation");
    }

    /// The element `css` once it is on the page and shown.
    pub async fn shown(&self, css: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(element) = self.client.find(Locator::Css(css)).await
                && element.is_displayed().await.unwrap_or(false)
            {
                return element;
            }
            assert!(Instant::now() < deadline, "{css} was not shown within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `script` (a function body returning a value) returns
    /// something other than null / false, and returns it.
    pub async fn until(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let value = self.eval(script).await;
            if !(value.is_null() || value == Value::Bool(false)) {
                return value;
            }
            assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the text of `css` is `expected`.
    pub async fn until_text(&self, css: &str, expected: &str) {
        let script = format!(
            "const e = document.querySelector({css:?}); return e !== null && e.textContent.trim() === {expected:?};"
        );
        let deadline = Instant::now() + WAIT;
        loop {
            if self.eval(&script).await == Value::Bool(true) {
                return;
            }
            let now = self.text(css).await;
            assert!(
                Instant::now() < deadline,
                "{css} still reads {now:?}, not {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .expect("script runs")
    }

    /// The text of `css`, empty when it is not there.
    pub async fn text(&self, css: &str) -> String {
        let script = format!(
            "const e = document.querySelector({css:?}); return e === null ? '' : e.textContent.trim();"
        );
        self.eval(&script).await.as_str().unwrap_or_default().to_owned()
    }

    /// Types `text` into the field `css` (after clearing it).
    pub async fn type_into(&self, css: &str, text: &str) {
        let field = self.shown(css).await;
        field.clear().await.expect("cleared");
        field.send_keys(text).await.expect("typed");
    }

    pub async fn click(&self, css: &str) {
        self.shown(css).await.click().await.expect("clicked");
    }

    /// Sets a field the keyboard cannot fill exactly (a datetime-local to
    /// the second) and tells the page, as an editor's input would.
    pub async fn set_value(&self, css: &str, value: &str) {
        let script = format!(
            "const e = document.querySelector({css:?}); e.value = {value:?}; \
             e.dispatchEvent(new Event('input', {{bubbles: true}})); return e.value;"
        );
        let shown = self.eval(&script).await;
        // A browser writes a whole minute without its seconds ("…T20:43").
        let whole_minute = value.strip_suffix(":00").unwrap_or(value);
        assert!(
            shown == Value::String(value.to_owned()) || shown == Value::String(whole_minute.to_owned()),
            "{css} holds {shown}, not {value}"
        );
    }

    /// Saves a PNG of the window as `docs/console-<name>.png` when
    /// `CLARION_CONSOLE_SCREENSHOTS` names the docs directory.
    pub async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("CLARION_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(format!("{dir}/console-{name}.png"), png).expect("screenshot written");
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
