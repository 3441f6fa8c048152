//! One client connection through the proxy: a thread reading the client's requests, one
//! reading the broker's answers, and one writing answers to the client in request order
//! (Kafka's clients expect them so), each at its time.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use super::Shared;
use super::answers::{Request, Rewrite};
use super::rules::Action;

/// The largest frame the proxy reads (Kafka's default `socket.request.max.bytes`).
const MAX_FRAME: usize = 100 * 1024 * 1024;

/// Accepts clients on `listener` and connects each to `upstream` until the proxy stops.
pub(super) fn serve(listener: TcpListener, upstream: String, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        match TcpStream::connect(&upstream) {
            Ok(server) => start(client, server, &shared),
            // The broker is down: the client sees its connection refused, as it would.
            Err(_) => drop(client),
        }
    }
}

/// What becomes of a request's answer.
#[derive(Debug)]
enum Then {
    Pass,
    Close,
    Delay(Duration),
}

/// One request waiting for its answer to be written.
#[derive(Debug)]
struct Slot {
    /// How the broker's answer is rewritten; `None` for an answer passed as it comes.
    rewrite: Option<Rewrite>,
    then: Then,
    /// The answer and when it may be written, or `None` to close the connection.
    answer: Option<Option<(Bytes, Instant)>>,
}

struct Conn {
    client: TcpStream,
    server: TcpStream,
    slots: Mutex<VecDeque<Slot>>,
    ready: Condvar,
    closed: AtomicBool,
}

impl Conn {
    fn slots(&self) -> MutexGuard<'_, VecDeque<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
        self.ready.notify_all();
    }
}

fn start(client: TcpStream, server: TcpStream, shared: &Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let conn = Arc::new(Conn {
        client,
        server,
        slots: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        closed: AtomicBool::new(false),
    });
    shared.track(Tracked(Arc::downgrade(&conn)));
    let spawn = |name: &str, run: Box<dyn FnOnce() + Send>| {
        thread::Builder::new()
            .name(format!("fault-proxy-{name}"))
            .spawn(run)
            .is_ok()
    };
    let started = [
        {
            let (conn, shared) = (Arc::clone(&conn), Arc::clone(shared));
            spawn(
                "requests",
                Box::new(move || requests(client_reader, &conn, &shared)),
            )
        },
        {
            let (conn, shared) = (Arc::clone(&conn), Arc::clone(shared));
            spawn(
                "answers",
                Box::new(move || answers(server_reader, &conn, &shared)),
            )
        },
        {
            let conn = Arc::clone(&conn);
            spawn("writer", Box::new(move || writer(&conn)))
        },
    ];
    if started.contains(&false) {
        conn.close();
    }
}

/// A connection as the proxy keeps it, to close it when the proxy stops.
pub(super) struct Tracked(Weak<Conn>);

impl Tracked {
    /// Closes the connection, unless it is gone already.
    pub(super) fn close(&self) {
        if let Some(conn) = self.0.upgrade() {
            conn.close();
        }
    }

    /// Whether the connection is still open.
    pub(super) fn open(&self) -> bool {
        self.0
            .upgrade()
            .is_some_and(|conn| !conn.closed.load(Ordering::Relaxed))
    }
}

/// Reads one frame (its 4-byte big-endian length, then that many bytes).
fn read_frame(stream: &mut TcpStream) -> io::Result<Bytes> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = usize::try_from(i32::from_be_bytes(len))
        .ok()
        .filter(|&len| len <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad frame length"))?;
    let mut frame = vec![0u8; len];
    stream.read_exact(&mut frame)?;
    Ok(Bytes::from(frame))
}

fn write_frame(mut stream: &TcpStream, frame: &[u8]) -> io::Result<()> {
    let len = i32::try_from(frame.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "frame too large"))?;
    let mut out = Vec::with_capacity(frame.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(frame);
    stream.write_all(&out)
}

/// The client's requests: passed on, answered by the proxy, or dropped.
fn requests(mut client: TcpStream, conn: &Conn, shared: &Shared) {
    while let Ok(frame) = read_frame(&mut client) {
        let Some(request) = Request::parse(&frame) else {
            // An API this kafka-protocol does not know: passed on, its answer untouched.
            conn.slots().push_back(Slot {
                rewrite: None,
                then: Then::Pass,
                answer: None,
            });
            if write_frame(&conn.server, &frame).is_err() {
                break;
            }
            continue;
        };
        shared.seen.count(request.api as i16);
        if shared.blackholed(&request.client_id) {
            continue;
        }
        let action = shared.action(request.api, &request.client_id);
        let mut rewrite = Rewrite {
            api: request.api,
            version: request.version,
            metadata_error: None,
        };
        let then = match action {
            Some(Action::Error(error)) if request.api == ApiKey::Metadata => {
                rewrite.metadata_error = Some(error.code());
                Then::Pass
            }
            Some(Action::Error(error)) => {
                if let Some(answer) = request.error_answer(error.code()) {
                    conn.slots().push_back(Slot {
                        rewrite: None,
                        then: Then::Pass,
                        answer: Some(Some((answer, Instant::now()))),
                    });
                    conn.ready.notify_all();
                    continue;
                }
                Then::Pass
            }
            Some(Action::DropConnection) => Then::Close,
            Some(Action::Delay(delay)) => Then::Delay(delay),
            None => Then::Pass,
        };
        if request.expects_answer() {
            conn.slots().push_back(Slot {
                rewrite: Some(rewrite),
                then,
                answer: None,
            });
        }
        if write_frame(&conn.server, &frame).is_err() {
            break;
        }
    }
    conn.close();
}

/// The broker's answers, in the order of the requests passed on.
fn answers(mut server: TcpStream, conn: &Conn, shared: &Arc<Shared>) {
    while let Ok(frame) = read_frame(&mut server) {
        let Some(rewrite) = waiting(&mut conn.slots()).map(|slot| slot.rewrite) else {
            break;
        };
        let frame = match rewrite {
            Some(rewrite) => rewrite.apply(frame, &mut |host, port| shared.local_port(host, port)),
            None => frame,
        };
        let mut slots = conn.slots();
        let Some(slot) = waiting(&mut slots) else {
            break;
        };
        slot.answer = Some(answer_of(&slot.then, frame));
        drop(slots);
        conn.ready.notify_all();
    }
    conn.close();
}

/// The slot of the oldest request passed on that has no answer yet: the broker answers a
/// connection's requests in order, so the next answer is its. Only this connection's
/// answers thread fills such slots, so the same slot is found before and after a rewrite.
fn waiting(slots: &mut VecDeque<Slot>) -> Option<&mut Slot> {
    slots.iter_mut().find(|slot| slot.answer.is_none())
}

fn answer_of(then: &Then, frame: Bytes) -> Option<(Bytes, Instant)> {
    match then {
        Then::Pass => Some((frame, Instant::now())),
        Then::Delay(delay) => Some((frame, Instant::now() + *delay)),
        Then::Close => None,
    }
}

/// Writes the answers in request order, each once it is due; closes the connection for an
/// answer to drop.
fn writer(conn: &Conn) {
    let mut slots = conn.slots();
    loop {
        if conn.closed.load(Ordering::Relaxed) {
            return;
        }
        let due = match slots.front().map(|slot| &slot.answer) {
            Some(Some(Some((_, at)))) => Some(*at),
            Some(Some(None)) => {
                drop(slots);
                conn.close();
                return;
            }
            _ => None,
        };
        let now = Instant::now();
        match due {
            Some(at) if at <= now => {
                let Some(Slot {
                    answer: Some(Some((frame, _))),
                    ..
                }) = slots.pop_front()
                else {
                    continue;
                };
                drop(slots);
                if write_frame(&conn.client, &frame).is_err() {
                    conn.close();
                    return;
                }
                slots = conn.slots();
            }
            Some(at) => {
                slots = conn
                    .ready
                    .wait_timeout(slots, at - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            None => {
                slots = conn
                    .ready
                    .wait_timeout(slots, Duration::from_millis(500))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
    }
}
