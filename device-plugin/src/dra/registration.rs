//! The kubelet's plugin watcher finds `<registry dir>/rdma.kuberdma.io-reg.sock`,
//! calls `GetInfo` on it (and again whenever it re-validates the plugin), then
//! tells us the verdict with `NotifyRegistrationStatus`.

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::api::registration::registration_server::Registration;
use super::api::registration::{InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse};
use super::{PLUGIN_TYPE, SUPPORTED_VERSIONS};

/// What the kubelet said last.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Registered {
    /// Nothing yet.
    #[default]
    Unknown,
    /// Registered.
    Yes,
    /// Refused, with the kubelet's reason.
    No(String),
}

#[derive(Clone)]
pub struct RegistrationService {
    driver: String,
    endpoint: String,
    state: watch::Sender<Registered>,
}

impl RegistrationService {
    /// Answers `GetInfo` with `driver` served at the absolute socket path `endpoint`.
    pub fn new(driver: &str, endpoint: &str) -> (Self, watch::Receiver<Registered>) {
        let (state, rx) = watch::channel(Registered::Unknown);
        (RegistrationService { driver: driver.into(), endpoint: endpoint.into(), state }, rx)
    }

    /// The `GetInfo` answer.
    pub fn info(&self) -> PluginInfo {
        PluginInfo {
            r#type: PLUGIN_TYPE.into(),
            name: self.driver.clone(),
            endpoint: self.endpoint.clone(),
            supported_versions: SUPPORTED_VERSIONS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        tracing::debug!("GetInfo from the kubelet");
        Ok(Response::new(self.info()))
    }

    async fn notify_registration_status(
        &self,
        req: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let s = req.into_inner();
        let state = if s.plugin_registered {
            tracing::info!(driver = %self.driver, "registered with the kubelet");
            Registered::Yes
        } else {
            tracing::error!(driver = %self.driver, error = %s.error, "the kubelet refused the registration");
            Registered::No(s.error)
        };
        self.state.send_replace(state);
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
