//! A text (or meta) connection's requests, one at a time: the login a `-Y` server
//! asks for first, then each request checked, passed on to another node in a
//! cluster, or run here.

use std::sync::Arc;

use kura_protocol::{parse, Parsed};

use super::{Conn, Shared, Step};
use crate::dispatch::{self, Flow};
use crate::stats::bump;
use crate::sync_replies as sync;

/// A login on a text connection that has not logged in, as memcached's `-Y` reads it.
async fn text_login(shared: &Arc<Shared>, conn: &mut Conn, input: &[u8]) -> Step {
    use kura_protocol::auth::{parse_text_login, TextLogin, LOGGED_IN, LOGIN_FAILED};
    match parse_text_login(input) {
        TextLogin::Incomplete => Step::Incomplete,
        TextLogin::Close => {
            conn.drop_unsent();
            Step::Ran {
                consumed: input.len(),
                flow: Flow::Close,
            }
        }
        TextLogin::Refused { reply, consumed } => {
            conn.out.extend_from_slice(reply);
            Step::Ran {
                consumed,
                flow: Flow::Continue,
            }
        }
        TextLogin::Login {
            user,
            password,
            consumed,
        } => {
            let user = crate::auth::check(shared, conn.peer, "text", user, password).await;
            conn.out.extend_from_slice(if user.is_some() {
                LOGGED_IN
            } else {
                LOGIN_FAILED
            });
            Step::Ran {
                consumed,
                flow: conn.logged_in(user),
            }
        }
    }
}

/// Parses and runs the first text or meta request in `input`.
pub(super) async fn text_step(shared: &Arc<Shared>, conn: &mut Conn, input: &[u8]) -> Step {
    if !conn.authenticated {
        return text_login(shared, conn, input).await;
    }
    match parse(input, &shared.limits) {
        Parsed::Incomplete => Step::Incomplete,
        Parsed::Request { request, consumed } => {
            let line = &input[..consumed];
            let (user, peer) = (conn.user.as_ref(), conn.peer);
            let mut refused = Vec::new();
            if !crate::auth::permitted(shared, user, peer, &request, line, &mut refused) {
                conn.forwards.launch(shared);
                conn.out.extend_from_slice(&refused);
                return Step::Ran {
                    consumed,
                    flow: Flow::Continue,
                };
            }
            let wanted = sync::wanted(shared, &request);
            if let Some(refusal) = wanted.and_then(|w| sync::refusal(shared, w)) {
                conn.forwards.launch(shared);
                conn.out.extend_from_slice(&refusal);
                return Step::Ran {
                    consumed,
                    flow: Flow::Continue,
                };
            }
            // While the ring changes, a change to a key this shard is handing to
            // another waits for the hand-off, and is counted until it is made.
            let _admitted = if crate::cluster::enabled(&shared.config)
                && crate::sync_replies::changes(&request)
            {
                let mut keys = Vec::new();
                crate::reader::keys_of(&request, |k| keys.push(k));
                match crate::cluster::admit(shared, &keys).await {
                    Ok(admitted) => admitted,
                    Err(why) => {
                        conn.forwards.launch(shared);
                        if !request.noreply() {
                            conn.out
                                .extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes());
                        }
                        return Step::Ran {
                            consumed,
                            flow: Flow::Continue,
                        };
                    }
                }
            } else {
                None
            };
            // In a cluster, a key another shard owns goes on to that shard's primary,
            // and a replica passes changes (and reads) on to its primary.
            let in_container = conn.session.container.is_some();
            if let Some(forwarding) = crate::cluster::forwarded(shared, in_container, &request) {
                if let crate::cluster::Forwarding::To { primary, bytes } = forwarding {
                    // Queued: the requests behind it go on meanwhile.
                    if conn
                        .forwards
                        .push(primary, bytes, request.noreply(), conn.out.len())
                    {
                        // As many as a queue holds: their replies first.
                        conn.settle_forwards(shared).await;
                    }
                    return Step::Ran {
                        consumed,
                        flow: Flow::Continue,
                    };
                }
                // It goes over connections of its own: what was passed on before it
                // is answered first, so that a node sees a key's requests in order.
                conn.settle_forwards(shared).await;
                let start = conn.out.len();
                match forwarding {
                    crate::cluster::Forwarding::Split(placement) => {
                        crate::cluster::split_get(shared, &placement, &request, &mut conn.out)
                            .await;
                    }
                    forwarding => crate::cluster::forward(shared, forwarding, &mut conn.out).await,
                }
                dispatch::drop_noreply_reply(shared, request.noreply(), start, &mut conn.out);
                return Step::Ran {
                    consumed,
                    flow: Flow::Continue,
                };
            }
            conn.forwards.launch(shared);
            crate::reader::load_values(shared, &mut conn.session, &request).await;
            let start = conn.out.len();
            let outcome = dispatch::execute(shared, &mut conn.session, request, &mut conn.out);
            if let Some(lsn) = outcome.lsn {
                conn.hold(start, lsn, wanted, None, shared);
            }
            Step::Ran {
                consumed,
                flow: outcome.flow,
            }
        }
        Parsed::Error {
            error,
            consumed,
            swallow_bytes,
            close,
            noreply,
            unlink_key,
        } => {
            conn.forwards.launch(shared);
            if noreply {
                bump(&shared.counters.local().noreply_errors_dropped);
            } else {
                dispatch::write_error(&error, &mut conn.out);
            }
            if let Some(key) = unlink_key {
                let start = conn.out.len();
                match crate::semantics::drop_on_refused_set(&shared.store, &key) {
                    Ok(Some(lsn)) => conn.mark(start, lsn, None, shared),
                    Ok(None) => {}
                    Err(e) => dispatch::write_engine_error(&e, &mut conn.out),
                }
            }
            conn.swallow_bytes = swallow_bytes;
            let flow = if close { Flow::Close } else { Flow::Continue };
            Step::Ran { consumed, flow }
        }
    }
}
