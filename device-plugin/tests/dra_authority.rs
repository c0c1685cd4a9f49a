//! The real `kube-rdma-device-plugin dra` answers `GetInfo` on its
//! registration socket when the request's `:authority` is the socket path,
//! as the kubelet's plugin watcher sends it (grpc-go dialling a bare path:
//! pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go
//! `dial`). The client is written byte by byte, since an HTTP/2 client
//! library would refuse such an authority itself; it sends a second request
//! that refers to the first one's HPACK dynamic table entries, as grpc-go
//! does for `NotifyRegistrationStatus` on the same connection.

mod dra_fixtures;

use std::time::Duration;

use dra_fixtures::*;
use kube_rdma_device_plugin::dra::api::registration::PluginInfo;
use kube_rdma_device_plugin::dra::authority::huffman_encode;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// RFC 7541 §5.2 string literal, Huffman-coded as grpc-go's encoder does
/// when that is shorter (here always; all strings are under 127 bytes).
fn huffman(s: &str) -> Vec<u8> {
    let body = huffman_encode(s.as_bytes());
    assert!(body.len() < 127);
    let mut out = vec![0x80 | body.len() as u8];
    out.extend(body);
    out
}

/// The first request's header block: `:path` and `:authority` with
/// incremental indexing (RFC 7541 §6.2.1), so they become dynamic entries
/// 63 and 62.
fn first_block(authority: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http (static 3, 6)
    b.push(0x44); // :path, static name 4
    b.extend(huffman("/pluginregistration.Registration/GetInfo"));
    b.push(0x41); // :authority, static name 1
    b.extend(huffman(authority));
    b.push(0x0f);
    b.push(0x10); // content-type (static 31), without indexing
    b.extend(huffman("application/grpc"));
    b.push(0x00); // te, literal name, without indexing
    b.extend(huffman("te"));
    b.extend(huffman("trailers"));
    b
}

/// The second request refers to both entries by index (RFC 7541 §6.1).
fn second_block() -> Vec<u8> {
    let mut b = vec![0x83, 0x86, 0x80 | 63, 0x80 | 62, 0x0f, 0x10];
    b.extend(huffman("application/grpc"));
    b.push(0x00);
    b.extend(huffman("te"));
    b.extend(huffman("trailers"));
    b
}

/// An empty `InfoRequest` as a gRPC message: not compressed, length 0.
const EMPTY_MESSAGE: [u8; 5] = [0; 5];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_info_with_the_socket_path_as_authority_is_answered() {
    let sim = nic::sim::Sim::from_file(example("cx6dx-dual.yaml")).expect("materialise the example node");
    let env = Env::new("cx6dx-dual", sim.roots()).await;
    let driver = env.spawn(&[]);
    let socket = env.reg_socket();
    let authority = socket.to_string_lossy().into_owned();
    assert!(authority.contains('/'));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut conn = loop {
        if let Ok(c) = tokio::net::UnixStream::connect(&socket).await {
            break c;
        }
        assert!(tokio::time::Instant::now() < deadline, "no registration socket at {authority}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(HEADERS, END_HEADERS, 1, &first_block(&authority)));
    out.extend(frame(DATA, END_STREAM, 1, &EMPTY_MESSAGE));
    out.extend(frame(HEADERS, END_HEADERS, 3, &second_block()));
    out.extend(frame(DATA, END_STREAM, 3, &EMPTY_MESSAGE));
    conn.write_all(&out).await.unwrap();

    // Read frames until both streams ended; collect their DATA.
    let mut answers: [Vec<u8>; 2] = Default::default();
    let mut ended = [false; 2];
    let mut buf = Vec::new();
    let read = async {
        while !(ended[0] && ended[1]) {
            while buf.len() >= 9 {
                let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
                if buf.len() < 9 + len {
                    break;
                }
                let (kind, flags) = (buf[3], buf[4]);
                let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                let payload = buf[9..9 + len].to_vec();
                buf.drain(..9 + len);
                let at = match stream {
                    1 => 0,
                    3 => 1,
                    _ => {
                        assert_ne!(kind, GOAWAY, "GOAWAY {payload:02x?}");
                        if kind == SETTINGS && flags & 1 == 0 {
                            conn.write_all(&frame(SETTINGS, 1, 0, &[])).await.unwrap();
                        }
                        continue;
                    }
                };
                assert_ne!(kind, RST_STREAM, "stream {stream} reset: error code {payload:02x?}");
                if kind == DATA {
                    answers[at].extend(&payload);
                }
                if (kind == DATA || kind == HEADERS) && flags & END_STREAM != 0 {
                    ended[at] = true;
                }
            }
            if ended[0] && ended[1] {
                break;
            }
            let mut chunk = [0u8; 4096];
            let n = conn.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("both answers within 10 s");

    for (i, answer) in answers.iter().enumerate() {
        assert!(answer.len() > 5, "request {} got no message: {answer:02x?}", i + 1);
        assert_eq!(answer[0], 0, "not compressed");
        let len = u32::from_be_bytes([answer[1], answer[2], answer[3], answer[4]]) as usize;
        let info = PluginInfo::decode(&answer[5..5 + len]).expect("a PluginInfo");
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.name, DRIVER);
        assert_eq!(info.endpoint, env.dra_socket().to_string_lossy());
    }
    driver.stop().await;
}
