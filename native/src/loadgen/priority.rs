//! Scheduling priority of the engine's threads (load generator and test server).
//!
//! Design: a thread that must act at precise times (think-time ends, arrivals, delayed
//! responses) asks for the real-time FIFO class, so a busy machine cannot make it late; a
//! guard watches its CPU use and steps it down to nice -10 if it ever needs more than half a
//! core, so it can never starve the machine. Every step is best effort: without the privilege
//! (root or CAP_SYS_NICE) the thread keeps the next lower class.

use super::config::Priority;
use super::sys;

/// Nice value of `Priority::High`.
pub const HIGH_NICE: i32 = -10;
/// Share of a core above which a real-time thread steps down to `High`.
pub const REALTIME_MAX_CPU: f64 = 0.5;
/// Window over which that share is measured.
const WINDOW_NS: i64 = 1_000_000_000;

/// The priority a thread got, and the guard that may lower it.
#[derive(Debug)]
pub struct PriorityGuard {
    /// The class the thread runs in now.
    pub current: Priority,
    /// Whether it left the real-time class because it used too much CPU.
    pub demoted: bool,
    window_t: i64,
    window_cpu: i64,
}

impl PriorityGuard {
    /// Asks for `wanted` for the calling thread; real time only if `timed` (the thread has
    /// deadlines to keep), else it settles for `High`.
    pub fn raise(wanted: Priority, timed: bool) -> PriorityGuard {
        let current = if wanted == Priority::Realtime && timed && sys::set_thread_realtime(true) {
            Priority::Realtime
        } else if wanted >= Priority::High && sys::set_thread_nice(HIGH_NICE) {
            Priority::High
        } else {
            Priority::Normal
        };
        PriorityGuard {
            current,
            demoted: false,
            window_t: sys::mono_ns(),
            window_cpu: sys::thread_cpu_ns(),
        }
    }

    /// Call now and then from the thread itself (it reads the thread's CPU clock once a second).
    pub fn check(&mut self, now: i64) {
        if self.current != Priority::Realtime || now - self.window_t < WINDOW_NS {
            return;
        }
        let cpu = sys::thread_cpu_ns();
        let share = (cpu - self.window_cpu) as f64 / (now - self.window_t) as f64;
        self.window_t = now;
        self.window_cpu = cpu;
        if share > REALTIME_MAX_CPU {
            sys::set_thread_realtime(false);
            self.current = if sys::set_thread_nice(HIGH_NICE) {
                Priority::High
            } else {
                Priority::Normal
            };
            self.demoted = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_real_time_thread_steps_down() {
        std::thread::spawn(|| {
            let mut g = PriorityGuard::raise(Priority::Realtime, true);
            if g.current != Priority::Realtime {
                return; // not permitted here: nothing to test
            }
            let t0 = sys::mono_ns();
            let mut x = 0u64;
            while sys::mono_ns() - t0 < 1_100_000_000 {
                x = x.wrapping_add(1);
                std::hint::black_box(x);
            }
            g.check(sys::mono_ns());
            assert!(g.demoted);
            assert_ne!(g.current, Priority::Realtime);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn untimed_threads_never_ask_for_real_time() {
        std::thread::spawn(|| {
            let g = PriorityGuard::raise(Priority::Realtime, false);
            assert_ne!(g.current, Priority::Realtime);
        })
        .join()
        .unwrap();
    }
}
