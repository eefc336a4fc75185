//! Recording a batch of receipts requests in one transaction, set-based
//! (a fixed number of statements per batch): which receipts count, which
//! are duplicates, which are ignored, and what they add to each
//! notification's aggregates. The answers are given only after the commit.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use super::bins::{TWO_MINUTES_MS, bin_of};
use super::body::{Event, Receipt};
use super::store::{self, Increments, Target};
use crate::store::StoreError;
use crate::store::prepared::Prepared;

/// Counter rows per notification: concurrent requests for one notification
/// spread their counter updates over this many rows (one lock each).
pub const SLOTS: i16 = 16;

/// What became of a request's receipts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    pub accepted: u64,
    pub duplicates: u64,
    pub ignored: u64,
    /// Per event (`Event::ALL` order): accepted, duplicates, ignored.
    pub by_event: [[u64; 3]; 2],
    /// Seconds from the send of each newly counted receipt, per event.
    pub delays: Vec<(Event, f64)>,
}

impl Outcome {
    fn tally(&mut self, event: Event, column: usize) {
        let row = match event {
            Event::Received => 0,
            Event::Opened => 1,
        };
        self.by_event[row][column] += 1;
        match column {
            0 => self.accepted += 1,
            1 => self.duplicates += 1,
            _ => self.ignored += 1,
        }
    }
}

/// `at` (the arrival time when the device gave none) within
/// [`sent_at`, `now`]: phone clocks are wrong both ways.
pub fn clamp(at: Option<DateTime<Utc>>, sent_at: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
    let at = at.unwrap_or(now);
    if now < sent_at {
        return sent_at;
    }
    at.clamp(sent_at, now)
}

/// One request's receipts with what they are judged by.
pub struct Request<'a> {
    pub receipts: &'a [Receipt],
    /// The arrival of the request (receipt times are clamped to it).
    pub now: DateTime<Utc>,
    /// The detail retention's cutoff: receipts of notifications sent
    /// before it are ignored.
    pub cutoff: Option<DateTime<Utc>>,
    /// Whether the caller's key may speak for a notification's app (the
    /// receipts of other apps are ignored).
    pub may_use_app: &'a (dyn Fn(&str) -> bool + Sync),
    /// The counter slot its increments go to.
    pub slot: i16,
}

/// A receipt judged: ignored, or counted for `key` if it is the first of
/// its event for that row in its request (the rest are duplicates) and its
/// request claimed the write.
enum Verdict<'a> {
    Ignored(Event),
    Judged {
        event: Event,
        key: (Uuid, &'a str),
        first: bool,
    },
}

/// Which request of the batch writes a row, and the time it writes.
struct Claim {
    request: usize,
    at: DateTime<Utc>,
    /// The time is a `received` one (an `opened` gives the row its time
    /// only when its request has no `received` for the device).
    from_received: bool,
}

/// Records the receipts of a batch of `requests` (in arrival order) with a
/// fixed number of statements: the notifications, the reporting
/// membership of every (notification, token), the `received` rows, the
/// opens, and the aggregates (two statements sent together). Returns one
/// outcome per request, exactly as if the requests had been recorded one
/// after the other in arrival order: the first receipt of a device and
/// event counts, a second one (in the same request or a later one) is a
/// duplicate. Commits nothing: the caller commits `tx`.
pub async fn record(tx: &Prepared<'_>, requests: &[Request<'_>]) -> Result<Vec<Outcome>, StoreError> {
    let ids: BTreeSet<Uuid> = requests
        .iter()
        .flat_map(|request| request.receipts.iter().map(|r| r.notification_id))
        .collect();
    // The earliest cutoff (none if a request has none); each request's own
    // is applied below, on the same column.
    let cutoff = requests
        .iter()
        .map(|request| request.cutoff)
        .collect::<Option<Vec<_>>>()
        .and_then(|cutoffs| cutoffs.into_iter().min());
    let ids: Vec<Uuid> = ids.into_iter().collect();
    let targets = store::targets(tx, &ids, cutoff).await?;
    let target_of = |request: &Request<'_>, receipt: &Receipt| {
        targets.get(&receipt.notification_id).filter(|target| {
            request.cutoff.is_none_or(|cutoff| target.sent_at >= cutoff) && (request.may_use_app)(&target.app)
        })
    };
    let pairs: BTreeMap<(Uuid, &str), &Target> = requests
        .iter()
        .flat_map(|request| {
            request.receipts.iter().filter_map(move |receipt| {
                target_of(request, receipt).map(|target| ((target.id, receipt.token.as_str()), target))
            })
        })
        .collect();
    let reporting = if pairs.is_empty() {
        HashSet::new()
    } else {
        let pairs: Vec<(&Target, &str)> = pairs
            .iter()
            .map(|((_, token), target)| (*target, *token))
            .collect();
        store::reporting_pairs(tx, &pairs).await?
    };

    // Who writes which row: the first request (in arrival order) that
    // brings a counted receipt for it, as the requests one after the
    // other would have.
    let mut rows: BTreeMap<(Uuid, &str), Claim> = BTreeMap::new();
    let mut opens: BTreeMap<(Uuid, &str), Claim> = BTreeMap::new();
    let mut verdicts: Vec<Vec<Verdict<'_>>> = Vec::with_capacity(requests.len());
    for (index, request) in requests.iter().enumerate() {
        let mut seen: HashSet<(Event, Uuid, &str)> = HashSet::new();
        let mut judged = Vec::with_capacity(request.receipts.len());
        for receipt in request.receipts {
            let token = receipt.token.as_str();
            let Some(target) = target_of(request, receipt)
                .filter(|target| reporting.contains(&(target.id, receipt.token.clone())))
            else {
                judged.push(Verdict::Ignored(receipt.event));
                continue;
            };
            let key = (target.id, token);
            let first = seen.insert((receipt.event, target.id, token));
            if first {
                let at = clamp(receipt.at, target.sent_at, request.now);
                let from_received = receipt.event == Event::Received;
                let row = rows.entry(key).or_insert(Claim {
                    request: index,
                    at,
                    from_received,
                });
                // An `opened` without a `received` counts as both: its
                // request's row takes the open's time, unless the same
                // request also says when it was received.
                if row.request == index && from_received && !row.from_received {
                    row.at = at;
                    row.from_received = true;
                }
                if receipt.event == Event::Opened {
                    opens.entry(key).or_insert(Claim {
                        request: index,
                        at,
                        from_received,
                    });
                }
            }
            judged.push(Verdict::Judged {
                event: receipt.event,
                key,
                first,
            });
        }
        verdicts.push(judged);
    }

    let received_rows = claimed(&rows);
    let opened_rows = claimed(&opens);
    // Sent together, in this order: the opens find the rows just inserted.
    let (new_received, new_opened) = futures::try_join!(
        async {
            match received_rows.is_empty() {
                true => Ok(HashMap::new()),
                false => store::insert_received(tx, &received_rows).await,
            }
        },
        async {
            match opened_rows.is_empty() {
                true => Ok(HashMap::new()),
                false => store::mark_opened(tx, &opened_rows).await,
            }
        },
    )?;

    let mut outcomes: Vec<Outcome> = requests.iter().map(|_| Outcome::default()).collect();
    for (index, judged) in verdicts.iter().enumerate() {
        for verdict in judged {
            match *verdict {
                Verdict::Ignored(event) => outcomes[index].tally(event, 2),
                Verdict::Judged { event, key, first } => {
                    let (claims, written) = match event {
                        Event::Received => (&rows, &new_received),
                        Event::Opened => (&opens, &new_opened),
                    };
                    let counted = first
                        && claims.get(&key).is_some_and(|claim| claim.request == index)
                        && written.contains_key(&(key.0, key.1.to_owned()));
                    outcomes[index].tally(event, if counted { 0 } else { 1 });
                }
            }
        }
    }

    // What the rows written add to the aggregates, each in the slot of
    // the request that wrote it.
    let mut increments: BTreeMap<(Uuid, i16), Increments> = BTreeMap::new();
    for (event, claims, written) in [
        (Event::Received, &rows, &new_received),
        (Event::Opened, &opens, &new_opened),
    ] {
        for ((id, token), at) in written {
            let (Some(claim), Some(target)) = (claims.get(&(*id, token.as_str())), targets.get(id)) else {
                continue;
            };
            let request = &requests[claim.request];
            let inc = increments.entry((*id, request.slot)).or_default();
            match event {
                Event::Received => {
                    inc.received += 1;
                    if (request.now - target.sent_at) <= Duration::milliseconds(TWO_MINUTES_MS) {
                        inc.received_in_two += 1;
                    }
                }
                Event::Opened => inc.opened += 1,
            }
            let delay_ms = (*at - target.sent_at).num_milliseconds();
            *inc.delays.entry((event, bin_of(delay_ms))).or_default() += 1;
            outcomes[claim.request]
                .delays
                .push((event, delay_ms.max(0) as f64 / 1000.0));
        }
    }
    store::add_aggregates(tx, &increments).await?;
    Ok(outcomes)
}

/// The rows claimed, as the store writes them (sorted by key).
fn claimed<'a>(claims: &BTreeMap<(Uuid, &'a str), Claim>) -> Vec<(Uuid, &'a str, DateTime<Utc>)> {
    claims
        .iter()
        .map(|((id, token), claim)| (*id, *token, claim.at))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_clamped_to_the_send_and_the_arrival() {
        let sent = Utc::now() - Duration::seconds(60);
        let now = Utc::now();
        assert_eq!(clamp(None, sent, now), now);
        assert_eq!(clamp(Some(sent - Duration::hours(3)), sent, now), sent);
        assert_eq!(clamp(Some(now + Duration::hours(3)), sent, now), now);
        let between = sent + Duration::seconds(5);
        assert_eq!(clamp(Some(between), sent, now), between);
        // A send "in the future" (clock skew between replicas) is its own floor.
        assert_eq!(
            clamp(None, now + Duration::seconds(1), now),
            now + Duration::seconds(1)
        );
    }
}
