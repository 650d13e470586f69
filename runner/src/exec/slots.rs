//! Slots: how many jobs run at once, per resource.
//!
//! CPU jobs share the `-j` CPU slots; a job simulating many ranks takes several (its ranks share
//! the process's threads). Each GPU is its own pool (`--gpu-slots`, default 1), so GPU jobs never
//! oversubscribe a device's memory while CPU jobs run beside them. A job bigger than its pool
//! still runs, alone in it, rather than never.

use std::collections::HashMap;

use meshparity_specs::Device;

use super::options::{Memory, RunOptions};
use crate::plan::Job;

#[derive(Debug, Default)]
struct Pool {
    capacity: usize,
    used: usize,
}

/// Slots in use, by device.
#[derive(Debug)]
pub struct Slots {
    cpu_capacity: usize,
    gpu_capacity: usize,
    memory: Option<Memory>,
    pools: HashMap<Device, Pool>,
}

impl Slots {
    /// Pools for every device the run's jobs use.
    pub fn new(opts: &RunOptions, devices: impl IntoIterator<Item = Device>) -> Self {
        let mut slots = Self {
            cpu_capacity: opts.slots.max(1),
            gpu_capacity: opts.gpu_slots.max(1),
            memory: opts.memory,
            pools: HashMap::new(),
        };
        for d in devices {
            slots.pool(d);
        }
        slots
    }

    /// Whether no pool has a free slot: nothing more can start until a job ends.
    pub fn full(&self) -> bool {
        self.pools.values().all(|p| p.used >= p.capacity)
    }

    fn capacity(&self, device: Device) -> usize {
        if device.is_cpu() {
            self.cpu_capacity
        } else {
            self.gpu_capacity
        }
    }

    fn pool(&mut self, device: Device) -> &mut Pool {
        let capacity = self.capacity(device);
        self.pools
            .entry(device)
            .or_insert(Pool { capacity, used: 0 })
    }

    /// Slots `job` takes in its device's pool, at most the pool: a user's program one per
    /// rank it launches ([`super::executor::resources`]: each rank is a process of its own,
    /// and two 2-rank torchrun jobs on 2 cores ran gloo under contention, 2–3× slower, into
    /// timeouts); the built-in engine one on the CPU (more where its memory estimate is more
    /// than a slot's share of the host's), ceil(world/4) on a GPU (its memory); a level's judge
    /// one (it reads files and computes no mesh).
    ///
    /// The built-in engine's simulated ranks take turns between collectives, so a job's second
    /// thread did little while the quickstart's 8-rank jobs, at ceil(8/4) = 2 slots, ran one at
    /// a time; one slot each runs two side by side (measured in docs/performance.md). (On Slurm
    /// a job asks for ceil(world/4) CPUs: alone on them, its ranks' threads have them to
    /// themselves.)
    pub fn weight(&self, job: &Job) -> usize {
        if matches!(job.kind, crate::plan::JobKind::Check { .. }) {
            return 1;
        }
        let w = match super::executor::resources(job) {
            (cpus, gpus, Some(_)) => {
                if job.device.is_cpu() {
                    cpus
                } else {
                    gpus
                }
            }
            (_, _, None) if job.device.is_cpu() => self.memory_slots(job),
            (_, _, None) => (job.world_size as usize).div_ceil(4),
        };
        w.clamp(1, self.capacity(job.device))
    }

    /// The CPU slots a built-in job's memory asks for: one, or as many slots' shares of the
    /// host's memory as its estimate needs, so that jobs running at once fit together (one
    /// slot each, two 8-rank jobs of a large model could each need most of the machine).
    fn memory_slots(&self, job: &Job) -> usize {
        let Some(m) = self.memory else {
            return 1;
        };
        let share = m.room / self.cpu_capacity as f64;
        if share <= 0.0 {
            return 1;
        }
        ((m.estimate)(job) / share).ceil().max(1.0) as usize
    }

    /// Take `job`'s slots if its pool has room (an idle pool always has).
    pub fn take(&mut self, job: &Job) -> bool {
        let w = self.weight(job);
        let pool = self.pool(job.device);
        if pool.used > 0 && pool.used + w > pool.capacity {
            return false;
        }
        pool.used += w;
        true
    }

    /// Take `job`'s slots back for a retry: they were its own a moment ago.
    pub fn retake(&mut self, job: &Job) {
        let w = self.weight(job);
        self.pool(job.device).used += w;
    }

    pub fn release(&mut self, job: &Job) {
        let w = self.weight(job);
        let pool = self.pool(job.device);
        pool.used = pool.used.saturating_sub(w);
    }
}
