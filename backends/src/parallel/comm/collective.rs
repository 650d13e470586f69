//! Simulated process groups: every collective the parallel model runs, on per-rank tensors held
//! in one process.
//!
//! Each call names its *site* (`layers.3.mlp.down.fwd.all_reduce`) and the global ranks of its
//! group, and is logged: a job can say which collectives ran, and a fault (a catalogued
//! mutation) is injected here by site, exactly where the bug would sit in a real stack. The
//! reductions add rank contributions in rank order, and every rank receives the same result
//! tensor, so replicas stay bit-identical.

use std::collections::HashMap;

use burn::tensor::Tensor;
use serde::Serialize;

use super::trace::{canon, Canon, Record};
use crate::parallel::fault::{Alteration, Policies};
use crate::parallel::topology::{Layout, StageGroup};
use crate::positions::Positions;

/// One collective call, as recorded.
#[derive(Clone, Debug, Serialize)]
pub struct Call {
    pub site: String,
    pub op: &'static str,
    pub ranks: Vec<usize>,
    /// Set when a fault changed what this call did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub altered: Option<&'static str>,
}

/// Point-to-point message address: destination rank and tag.
type Address = (usize, String);

/// The communicator of one simulated run.
pub struct Comm {
    /// What the run's mutation does at each site (the correct computation by default).
    policies: Policies,
    calls: Vec<Call>,
    mailbox: HashMap<Address, Tensor<3>>,
    /// Things that would deadlock or corrupt a real run (a receive with no matching send).
    pub anomalies: Vec<String>,
    /// Values every rank of a group must hold alike (each computed from the same reduced
    /// sums) that differ between them, in words: a correct mesh never has one.
    pub divergent: Vec<String>,
    /// Whether sites record their canonical values ([`super::trace`]).
    tracing: bool,
    /// The row block the work on this communicator computes (replica × microbatches + mb).
    block: Option<usize>,
    records: Vec<Record>,
    /// The layout of the stage group this communicator's work runs on (from
    /// [`Comm::split`]; none on a step's whole-mesh communicator): TP collectives run per TP
    /// group, traces are put back in global sequence order, and each replica (several in
    /// lockstep under expert parallelism) traces its own row block, `stride` blocks after the
    /// previous one's.
    layout: Option<Layout>,
    stride: usize,
    /// Each (replica, cp rank)'s positions of the microbatch this communicator's work is on
    /// ([`crate::parallel::context::order`]): where a trace puts a cp rank's sequence entries
    /// back. Empty without context parallelism.
    order: Vec<Positions>,
}

impl Comm {
    pub fn new(policies: Policies) -> Self {
        Self {
            policies,
            calls: Vec::new(),
            mailbox: HashMap::new(),
            anomalies: Vec::new(),
            divergent: Vec::new(),
            tracing: false,
            block: None,
            records: Vec::new(),
            layout: None,
            stride: 0,
            order: Vec::new(),
        }
    }

    /// An empty communicator with this one's policies and tracing.
    pub fn fresh(&self) -> Self {
        Self {
            tracing: self.tracing,
            ..Self::new(self.policies)
        }
    }

    pub fn set_tracing(&mut self, on: bool) {
        self.tracing = on;
    }

    pub fn tracing(&self) -> bool {
        self.tracing
    }

    /// The layout of the stage group this communicator was split for.
    pub fn layout(&self) -> Layout {
        self.layout
            .expect("layers run on a stage group's communicator (Comm::split)")
    }

    /// Each replica's index and parts of a group's tensors, with its row block.
    fn per_replica<'p, T>(
        &self,
        parts: &'p [T],
    ) -> impl Iterator<Item = (usize, Option<usize>, &'p [T])> {
        let n = parts.len() / self.layout.map_or(1, |l| l.replicas);
        let (block, stride) = (self.block, self.stride);
        parts
            .chunks(n.max(1))
            .enumerate()
            .map(move |(d, p)| (d, block.map(|b| b + d * stride), p))
    }

    /// Where each (replica, cp rank)'s sequence entries go (set per microbatch).
    pub fn set_order(&mut self, order: Vec<Positions>) {
        self.order = order;
    }

    /// Replica `d`'s cp ranks' positions (empty when unset).
    pub fn order(&self, d: usize) -> &[Positions] {
        let cp = self.layout.map_or(1, |l| l.cp);
        self.order.get(d * cp..(d + 1) * cp).unwrap_or(&[])
    }

    pub fn set_block(&mut self, block: usize) {
        self.block = Some(block);
    }

    /// Record `site`'s canonical value from a group's per-rank tensors (when tracing).
    pub fn trace<const D: usize>(&mut self, site: &str, parts: &[Tensor<D>], how: Canon) {
        self.trace_like(site, None, parts, how);
    }

    /// [`Comm::trace`] for a site compared with another reference site.
    pub fn trace_like<const D: usize>(
        &mut self,
        site: &str,
        like: Option<String>,
        parts: &[Tensor<D>],
        how: Canon,
    ) {
        if !self.tracing {
            return;
        }
        let records: Vec<Record> = self
            .per_replica(parts)
            .map(|(d, block, parts)| Record {
                site: site.to_owned(),
                like: like.clone(),
                block,
                copies: canon(parts, how, self.layout.map(Layout::replica), self.order(d)),
            })
            .collect();
        self.records.extend(records);
        // A summed value's parts, each TP rank's, at `{site}%` (no reference value: not
        // compared): what a likely cause is tested against (one rank's share kept, a share
        // scaled). Under CP a rank's part is a sequence chunk's, not a share of the sum.
        if how == Canon::Sum && parts.len() > 1 && self.layout.is_none_or(|l| l.cp <= 1) {
            self.trace_each(&format!("{site}%"), parts);
        }
    }

    /// Record `site` from values every rank holds whole (e.g. per-sequence counts after their
    /// all-reduce): each rank's is a copy, compared as is.
    pub fn trace_each<const D: usize>(&mut self, site: &str, parts: &[Tensor<D>]) {
        if self.tracing {
            let records: Vec<Record> = self
                .per_replica(parts)
                .map(|(_, block, parts)| Record {
                    site: site.to_owned(),
                    like: None,
                    block,
                    copies: parts
                        .iter()
                        .map(|t| super::trace::Value::of(t.clone()))
                        .collect(),
                })
                .collect();
            self.records.extend(records);
        }
    }

    /// A step-wide record of already canonical values.
    pub fn trace_values(&mut self, site: &str, copies: Vec<super::trace::Value>) {
        if self.tracing {
            self.records.push(Record {
                site: site.to_owned(),
                like: None,
                block: None,
                copies,
            });
        }
    }

    /// The records so far, in order.
    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    /// What the run's mutation does at each site.
    pub fn policies(&self) -> &Policies {
        &self.policies
    }

    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// Calls whose behaviour a fault changed.
    pub fn altered(&self) -> impl Iterator<Item = &Call> {
        self.calls.iter().filter(|c| c.altered.is_some())
    }

    fn record(&mut self, site: &str, op: &'static str, ranks: &[usize]) -> Option<Alteration> {
        let alteration = self.policies.collectives.alter(site);
        self.calls.push(Call {
            site: site.to_owned(),
            op,
            ranks: ranks.to_vec(),
            altered: alteration.map(Alteration::as_str),
        });
        alteration
    }

    /// Sum over the group; every rank gets the same result. A group of one is a no-op and is
    /// not logged (as in Megatron, where a size-1 group never calls NCCL).
    pub fn all_reduce_sum<const D: usize>(
        &mut self,
        site: &str,
        ranks: &[usize],
        parts: Vec<Tensor<D>>,
    ) -> Vec<Tensor<D>> {
        if parts.len() == 1 {
            return parts;
        }
        match self.record(site, "all_reduce", ranks) {
            Some(Alteration::Skip) => parts,
            Some(Alteration::Average) => {
                let n = parts.len();
                vec![sum(parts) / n as f64; n]
            }
            Some(Alteration::FirstBlock) => vec![parts[0].clone(); parts.len()],
            _ => {
                let n = parts.len();
                vec![sum(parts); n]
            }
        }
    }

    /// Log a row exchange over a group (the tape moves the rows: `super::route`). A group of
    /// one moves nothing and is not logged.
    pub fn exchange(&mut self, site: &str, op: &'static str, ranks: &[usize]) {
        if ranks.len() > 1 {
            self.record(site, op, ranks);
        }
    }

    /// Elementwise maximum over the group (no gradient: used for the softmax shift).
    pub fn all_reduce_max<const D: usize>(
        &mut self,
        site: &str,
        ranks: &[usize],
        parts: Vec<Tensor<D>>,
    ) -> Vec<Tensor<D>> {
        if parts.len() == 1 {
            return parts;
        }
        self.record(site, "all_reduce_max", ranks);
        let n = parts.len();
        let mut it = parts.into_iter();
        let first = it.next().expect("a group has ranks");
        vec![it.fold(first, |a, b| a.max_pair(b)); n]
    }

    /// Concatenate every rank's block along `dim`; every rank gets the whole.
    pub fn all_gather<const D: usize>(
        &mut self,
        site: &str,
        ranks: &[usize],
        parts: Vec<Tensor<D>>,
        dim: usize,
    ) -> Vec<Tensor<D>> {
        if parts.len() == 1 {
            return parts;
        }
        let n = parts.len();
        if self.record(site, "all_gather", ranks) == Some(Alteration::SumBlocks) {
            return vec![Tensor::cat(vec![sum(parts); n], dim); n];
        }
        vec![Tensor::cat(parts, dim); n]
    }

    /// Sum over the group, then rank i keeps block i along `dim`.
    pub fn reduce_scatter<const D: usize>(
        &mut self,
        site: &str,
        ranks: &[usize],
        parts: Vec<Tensor<D>>,
        dim: usize,
    ) -> Vec<Tensor<D>> {
        let n = parts.len();
        if n == 1 {
            return parts;
        }
        let block = parts[0].dims()[dim] / n;
        let reduced = match self.record(site, "reduce_scatter", ranks) {
            Some(Alteration::Skip) => {
                return parts
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| p.narrow(dim, i * block, block))
                    .collect();
            }
            Some(Alteration::Average) => sum(parts) / n as f64,
            Some(Alteration::FirstBlock) => parts[0].clone(),
            _ => sum(parts),
        };
        (0..n)
            .map(|i| reduced.clone().narrow(dim, i * block, block))
            .collect()
    }

    /// One step around a context-parallel ring (ranks in ring order): rank c gets rank c−1's
    /// tensor, or rank c+1's `backward` (gradients return to their sender). A skipped step
    /// leaves each rank's buffer as it was: its previous step's tensor.
    pub fn ring_shift<const D: usize>(
        &mut self,
        site: &str,
        ranks: &[usize],
        parts: Vec<Tensor<D>>,
        backward: bool,
    ) -> Vec<Tensor<D>> {
        let n = parts.len();
        if n == 1 || self.record(site, "send_recv", ranks) == Some(Alteration::Skip) {
            return parts;
        }
        let from = |c: usize| {
            if backward {
                (c + 1) % n
            } else {
                (c + n - 1) % n
            }
        };
        (0..n).map(|c| parts[from(c)].clone()).collect()
    }

    /// Put a tensor in `to`'s mailbox under `tag`. A misrouting fault sends it to `wrong`.
    pub fn send(
        &mut self,
        site: &str,
        from: usize,
        to: usize,
        wrong: usize,
        tag: &str,
        t: Tensor<3>,
    ) {
        let dest = match self.record(site, "send", &[from, to]) {
            Some(Alteration::Misroute) => wrong,
            _ => to,
        };
        self.mailbox.insert((dest, tag.to_owned()), t);
    }

    /// Take the message for `to` under `tag`. A message that never arrived leaves the receive
    /// buffer as it was allocated: zeros of `shape` (and an anomaly on record).
    pub fn recv(
        &mut self,
        site: &str,
        from: usize,
        to: usize,
        tag: &str,
        like: impl FnOnce() -> Tensor<3>,
    ) -> Tensor<3> {
        self.record(site, "recv", &[from, to]);
        match self.mailbox.remove(&(to, tag.to_owned())) {
            Some(t) => t,
            None => {
                self.anomalies.push(format!(
                    "{site}: rank {to} received nothing from rank {from} for `{tag}` (buffer left as zeros)"
                ));
                like()
            }
        }
    }

    /// A fault that acted outside a collective (gradient accumulation or scaling), on record
    /// beside the calls.
    pub fn event(&mut self, site: &str, what: &'static str) {
        self.calls.push(Call {
            site: site.to_owned(),
            op: "event",
            ranks: Vec::new(),
            altered: Some(what),
        });
    }

    /// A sub-communicator for a stage group's work: the same fault, the messages addressed to
    /// the group's ranks, an empty record; its replicas' row blocks `stride` apart.
    pub fn split(&mut self, group: &StageGroup, stride: usize) -> Comm {
        let mine: Vec<Address> = self
            .mailbox
            .keys()
            .filter(|(to, _)| group.ranks.contains(to))
            .cloned()
            .collect();
        let mut sub = self.fresh();
        (sub.layout, sub.stride) = (Some(group.layout), stride);
        for key in mine {
            let t = self.mailbox.remove(&key).expect("listed keys are present");
            sub.mailbox.insert(key, t);
        }
        sub
    }

    /// Take over a sub-communicator's record (a replica's), after this one's.
    pub fn absorb(&mut self, sub: Comm) {
        self.calls.extend(sub.calls);
        self.anomalies.extend(sub.anomalies);
        self.divergent.extend(sub.divergent);
        self.records.extend(sub.records);
        self.mailbox.extend(sub.mailbox);
    }

    /// Messages sent but never received.
    pub fn undelivered(&self) -> usize {
        self.mailbox.len()
    }
}

/// Rank-ordered sum: the same association on every run and every rank.
fn sum<const D: usize>(parts: Vec<Tensor<D>>) -> Tensor<D> {
    let mut it = parts.into_iter();
    let first = it.next().expect("a group has ranks");
    it.fold(first, |a, b| a + b)
}
