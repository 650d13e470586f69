//! Loss curves from a program's log, for programs that write no metrics file: presets for the
//! log lines of Megatron-LM, torchtitan and pithtrain, or a user regex with named groups
//! `step` and `loss`. ANSI colour codes are stripped first (torchtitan colours its lines).

use regex::Regex;

pub use meshparity_specs::log_pattern::{pattern, LogError, PRESETS};

/// `(step, loss)` of every matching line, in log order. A step may be logged again with the
/// same loss (every rank of a torchrun job printing it); again with another loss, or after a
/// later step, is an error: one rank's value would stand for all, or the log is not one run's.
pub fn curve(log: &str, re: &Regex) -> Result<Vec<(u64, f64)>, CurveError> {
    let ansi = Regex::new(r"\x1b\[[0-9;]*[A-Za-z]").expect("a valid regex");
    let mut out: Vec<(u64, f64)> = Vec::new();
    // Where each step is in `out`: a search of `out` per line made a log of distinct steps
    // quadratic (the 16 MiB a job keeps of a log: minutes).
    let mut at: std::collections::HashMap<u64, (usize, usize)> = std::collections::HashMap::new();
    for (n, line) in log.lines().enumerate() {
        let lineno = n + 1;
        let line = ansi.replace_all(line, "");
        let Some(c) = re.captures(&line) else {
            continue;
        };
        let (Some(step), Some(loss)) = (c.name("step"), c.name("loss")) else {
            continue;
        };
        let Ok(step) = step.as_str().parse::<u64>() else {
            continue;
        };
        let loss = loss.as_str().parse::<f64>().unwrap_or(f64::NAN);
        match at.get(&step) {
            Some(&(i, _)) if out[i].1.to_bits() == loss.to_bits() => {}
            Some(&(i, first)) => {
                return Err(CurveError::Disagree {
                    step,
                    first: (out[i].1, first),
                    again: (loss, lineno),
                })
            }
            None => {
                if let Some(&(last, _)) = out.last().filter(|(s, _)| *s > step) {
                    return Err(CurveError::Order {
                        step,
                        line: lineno,
                        last,
                    });
                }
                at.insert(step, (out.len(), lineno));
                out.push((step, loss));
            }
        }
    }
    Ok(out)
}

/// A log whose loss lines are not one run's curve.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum CurveError {
    /// `(loss, line)` of each of the two lines.
    #[error(
        "step {step} is logged with loss {} (line {}) and {} (line {}): ranks disagree, or the \
         log holds more than one run",
        first.0, first.1, again.0, again.1
    )]
    Disagree {
        step: u64,
        first: (f64, usize),
        again: (f64, usize),
    },
    #[error("step {step} (line {line}) comes after step {last}; steps must increase")]
    Order { step: u64, line: usize, last: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_read_their_frameworks_lines() {
        let megatron =
            " [2026-01-01 00:00:00] iteration        2/      10 | consumed samples: 16 | \
                        elapsed time per iteration (ms): 12.3 | learning rate: 1.0E-04 | \
                        global batch size:     8 | lm loss: 1.066000E+01 | loss scale: 1.0 |";
        let titan = "\x1b[31mstep:  2  \x1b[32mloss:  7.5000  \x1b[33mmemory: 1.2GiB\x1b[39m";
        let pith = "| step 2/10 | cross-entropy-loss 3.25 | load-balance-loss 0.01 |";
        for (preset, line, loss) in [
            ("megatron", megatron, 10.66),
            ("torchtitan", titan, 7.5),
            ("pithtrain", pith, 3.25),
        ] {
            let got = curve(line, &pattern(preset).unwrap()).unwrap();
            assert_eq!(got, vec![(2, loss)], "{preset}");
        }
        let user = pattern(r"it=(?P<step>\d+) l=(?P<loss>\S+)").unwrap();
        assert_eq!(
            curve("it=1 l=2.5\nnoise\nit=2 l=nan", &user).unwrap()[0],
            (1, 2.5)
        );
        // Every rank printing its step: one value, kept once; two values: an error.
        assert_eq!(
            curve("it=1 l=2.5\nit=1 l=2.5", &user).unwrap(),
            vec![(1, 2.5)]
        );
        let e = curve("it=4 l=1.6\nit=4 l=99.0", &user)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && e.contains("line 2"), "{e}");
        assert!(curve("it=2 l=1\nit=1 l=1", &user).is_err());
        assert!(pattern(r"it=(\d+)").is_err(), "groups are required");
    }
}
