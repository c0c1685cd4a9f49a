//! Link events from the real kernel through `nic::netlink::events`: setting the netdevsim PF down and
//! up must reach a subscriber within 1 s each.

use crate::harness::{Lab, Test};
use crate::util::ifindex;
use anyhow::Context;
use netlink_packet_route::link::{LinkFlags, LinkHeader, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nic::netlink::events::{subscribe, Group, LinkEvent, RtnlEvent};
use nic::netlink::transport::{Client, SocketTransport, NETLINK_ROUTE};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::Receiver;

pub fn tests() -> Vec<Test> {
    vec![Test { name: "events-pf-down-up-within-1s", run: down_up }]
}

/// `ip link set dev IF up|down`, as one RTM_SETLINK with IFF_UP in the change mask.
pub fn set_up(index: u32, up: bool) -> anyhow::Result<()> {
    let mut c = Client::new(SocketTransport::open(NETLINK_ROUTE)?);
    let mut m = LinkMessage::default();
    m.header = LinkHeader {
        index,
        flags: if up { LinkFlags::Up } else { LinkFlags::empty() },
        change_mask: LinkFlags::Up,
        ..LinkHeader::default()
    };
    c.request(&format!("RTM_SETLINK ifindex {index} up={up}"), RouteNetlinkMessage::SetLink(m), false, 0)?;
    Ok(())
}

async fn wait_for(
    rx: &mut Receiver<RtnlEvent>,
    index: u32,
    want: impl Fn(&LinkEvent) -> bool,
) -> anyhow::Result<LinkEvent> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .context("no matching link event within 1 s")?
            .context("event channel closed")?;
        match ev {
            RtnlEvent::Link(l) if l.ifindex == index && want(&l) => return Ok(l),
            RtnlEvent::Overrun => anyhow::bail!("event socket overran"),
            _ => {}
        }
    }
}

fn down_up(lab: &Lab) -> anyhow::Result<String> {
    let index = ifindex(&lab.pf)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let pf = lab.pf.clone();
    let res = rt.block_on(async move {
        let mut rx = subscribe(&[Group::Link], 64)?;
        let t = Instant::now();
        set_up(index, false)?;
        let down = wait_for(&mut rx, index, |l| !l.admin_up).await.context("PF down")?;
        let t_down = t.elapsed();
        anyhow::ensure!(!down.is_up(), "down event reads as up: {down:?}");
        anyhow::ensure!(down.name.as_deref() == Some(pf.as_str()), "event names {:?}, not {pf}", down.name);
        let t = Instant::now();
        set_up(index, true)?;
        let up = wait_for(&mut rx, index, |l| l.is_up()).await.context("PF up")?;
        let t_up = t.elapsed();
        Ok::<_, anyhow::Error>(format!(
            "{pf} down seen in {} ms (operstate {:?}), up in {} ms (operstate {:?})",
            t_down.as_millis(),
            down.operstate,
            t_up.as_millis(),
            up.operstate
        ))
    });
    // Leave the PF up whatever happened.
    let _ = set_up(index, true);
    res
}
