//! Errors and the one function mapping them to CNI spec error codes
//! (CNI spec 1.1.0, "Error": 1–7, 11, 50, 51 well-known; 100+ ours).

use std::path::PathBuf;

use nic::netlink::link::LinkError;
use nic::netlink::transport::NlError;
use nic::netns::NetnsError;
use nic::vfdev::VfDevError;
use serde_json::json;

/// Everything the plugin can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `cniVersion` we do not speak.
    #[error("cniVersion {requested:?} is not supported (supported: {})", crate::cni_version::SUPPORTED_VERSIONS.join(", "))]
    Version {
        /// What the runtime asked for.
        requested: String,
    },
    /// A verb the configuration's `cniVersion` does not have (CHECK before
    /// 0.4.0, STATUS and GC before 1.1.0).
    #[error("{cmd} needs {since} or later, and the configuration's cniVersion is {version}")]
    VerbVersion {
        /// The verb (`CNI_COMMAND`).
        cmd: &'static str,
        /// The first version that has it.
        since: &'static str,
        /// The configuration's `cniVersion`.
        version: String,
    },
    /// A required environment variable is missing or invalid.
    #[error("environment variable {var}: {why}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong.
        why: String,
    },
    /// Stdin is not JSON.
    #[error("cannot decode the network configuration on stdin: {0}")]
    Decode(String),
    /// Stdin is larger than we read.
    #[error(
        "the network configuration on stdin is larger than {limit} bytes; a CNI configuration is a few KiB"
    )]
    TooLarge {
        /// The limit (`conf::STDIN_LIMIT`).
        limit: usize,
    },
    /// The configuration is valid JSON but wrong.
    #[error("invalid network configuration: {field}: {why}")]
    Config {
        /// The field (as in the JSON).
        field: String,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// The device named by `deviceID` cannot be used.
    #[error("device {pci}: {why}")]
    Device {
        /// PCI address.
        pci: String,
        /// What is wrong.
        why: String,
    },
    /// The VF named by `deviceID` cannot be found as a VF in sysfs (its
    /// message starts with `device <pci>:`).
    #[error(transparent)]
    Vf(#[from] VfDevError),
    /// The container's netns cannot be used (the message names it).
    #[error(transparent)]
    Netns(NetnsError),
    /// A lock could not be taken in time.
    #[error("{what} is busy (another ADD/DEL held its lock for more than {ms} ms); try again")]
    Busy {
        /// What was locked.
        what: String,
        /// How long we waited, in milliseconds.
        ms: u64,
    },
    /// The plugin cannot serve ADDs (STATUS).
    #[error("plugin not available: {0}")]
    Unavailable(String),
    /// File I/O.
    #[error("I/O error on {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A journal cannot be read.
    #[error("journal {} is unreadable ({why}); the attachment's DEL tears down without it and removes it", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The journal file an attachment's name hashes to holds another
    /// attachment (a hash collision): it is that one's, never ours to use.
    #[error("journal {} belongs to {owner}, not {wanted} (hash collision of their container IDs)", path.display())]
    Collision {
        /// The file.
        path: PathBuf,
        /// `containerID/ifname` it holds.
        owner: String,
        /// `containerID/ifname` looked for.
        wanted: String,
    },
    /// A netlink request failed.
    #[error("{step}")]
    Netlink {
        /// What we were doing.
        step: String,
        /// The error.
        #[source]
        source: NlError,
    },
    /// The IPAM plugin cannot be run at all: not in `CNI_PATH`, or not
    /// executable there. (DEL goes on without it: `cmd::del`.)
    #[error("IPAM plugin {plugin:?} cannot be run: {why}")]
    IpamNotRun {
        /// `ipam.type`.
        plugin: String,
        /// What is wrong, naming `CNI_PATH`.
        why: String,
    },
    /// An ADD its runtime has given up on: a DEL of the same attachment ran
    /// after the ADD began (`lock::Lock::del_after`), or it began
    /// longer ago than DELs are remembered. Nothing was attached.
    #[error("attachment {attachment}: {why}; nothing was attached")]
    Abandoned {
        /// `containerID/ifname`.
        attachment: String,
        /// What happened.
        why: String,
    },
    /// The IPAM plugin failed.
    #[error("IPAM plugin {plugin} {cmd} failed: {msg}")]
    Ipam {
        /// Plugin type.
        plugin: String,
        /// ADD or DEL.
        cmd: &'static str,
        /// The plugin's code (if it gave one).
        code: Option<u32>,
        /// Its message.
        msg: String,
    },
    /// RDMA device handling failed.
    #[error("RDMA: {0}")]
    Rdma(String),
    /// CHECK found a difference.
    #[error("CHECK failed: {0}")]
    Check(String),
    /// DRA mode: no prepared device for the pod, or the prepared files are unusable.
    #[error("DRA claim: {0}")]
    Claim(String),
}

impl Error {
    /// The CNI error code for this error.
    pub fn code(&self) -> u32 {
        match self {
            Error::Version { .. } | Error::VerbVersion { .. } => 1,
            Error::Env { .. } => 4,
            Error::Decode(_) | Error::TooLarge { .. } => 6,
            // A plugin the configuration names and the node does not have.
            Error::Config { .. } | Error::Device { .. } | Error::Vf(_) | Error::IpamNotRun { .. } => 7,
            // Spec: "3 - Container unknown or does not exist".
            Error::Netns(_) | Error::Abandoned { .. } => 3,
            Error::Busy { .. } => 11,
            Error::Unavailable(_) => 50,
            Error::Io { .. } | Error::Corrupt { .. } | Error::Collision { .. } => 5,
            Error::Netlink { .. } => 100,
            // Well-known codes the IPAM plugin gave (1-11; 50/51 from its STATUS).
            Error::Ipam { code: Some(c), .. } if (1..=11).contains(c) || *c == 50 || *c == 51 => *c,
            Error::Ipam { .. } => 101,
            Error::Check(_) => 102,
            Error::Rdma(_) => 103,
            Error::Claim(_) => 104,
        }
    }

    /// A short label (also usable as a metric label).
    pub fn label(&self) -> &'static str {
        match self {
            Error::Version { .. } | Error::VerbVersion { .. } => "version",
            Error::Env { .. } => "env",
            Error::Decode(_) | Error::TooLarge { .. } => "decode",
            Error::Config { .. } => "config",
            Error::Device { .. } | Error::Vf(_) => "device",
            Error::Netns(_) => "netns",
            Error::Busy { .. } => "busy",
            Error::Unavailable(_) => "unavailable",
            Error::Io { .. } => "io",
            Error::Corrupt { .. } | Error::Collision { .. } => "journal",
            Error::Netlink { .. } => "netlink",
            Error::Ipam { .. } | Error::IpamNotRun { .. } => "ipam",
            Error::Abandoned { .. } => "abandoned",
            Error::Rdma(_) => "rdma",
            Error::Check(_) => "check",
            Error::Claim(_) => "claim",
        }
    }

    /// The spec's error JSON.
    pub fn to_json(&self, cni_version: &str) -> serde_json::Value {
        use std::error::Error as _;
        let mut details = Vec::new();
        let mut src = self.source();
        while let Some(s) = src {
            details.push(s.to_string());
            src = s.source();
        }
        let mut v = json!({
            "cniVersion": cni_version,
            "code": self.code(),
            "msg": self.to_string(),
        });
        if !details.is_empty() {
            v["details"] = json!(details.join(": "));
        }
        v
    }

    /// The message and its causes, `: `-joined (for logs).
    pub fn chain(&self) -> String {
        nic::error_chain(self)
    }

    /// Shorthand for a config error.
    pub fn config(field: impl Into<String>, why: impl Into<String>) -> Self {
        Error::Config { field: field.into(), why: why.into() }
    }

    /// Shorthand for a netlink error.
    pub fn netlink(step: impl Into<String>, source: NlError) -> Self {
        Error::Netlink { step: step.into(), source }
    }

    /// A link request's error, with `step` saying what the plugin was doing:
    /// a netns that cannot be entered is [`Error::Netns`], anything else
    /// [`Error::Netlink`] with the kernel's answer as its source.
    pub fn link(step: impl Into<String>, e: LinkError) -> Self {
        match e {
            LinkError::Netns(e) => Error::Netns(e),
            LinkError::Socket { source, .. } => {
                Error::netlink(step, NlError::Io { op: "socket".into(), source })
            }
            LinkError::Request { source, .. } => Error::netlink(step, source),
        }
    }

    /// Shorthand for an I/O error.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

/// `?` on a link request: the step is the request itself (`look up link eth0`).
impl From<LinkError> for Error {
    fn from(e: LinkError) -> Self {
        let step = e.to_string();
        Error::link(step, e)
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
