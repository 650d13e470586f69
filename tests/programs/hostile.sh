#!/bin/sh
# A hostile program for the command engine's tests: what a user's program can do to a run.
# Run as `sh hostile.sh MODE MARK [TARGET]` in the job's out_dir; MARK (a number) tags every
# process it starts, so a test can look for what is left of them.
#   flood    print lines for ever (every byte kept would fill the disk)
#   orphans  ignore TERM, start a child in a session of its own, a background child that keeps
#            stdout open and one that ignores TERM, write a curve and exit 0
#   stubborn ignore TERM and never exit (only KILL ends it)
#   links    plant the curve as a link to TARGET, a file outside the run
set -u
mode=$1
mark=$2
case $mode in
flood)
    exec yes "flood flood flood flood $mark"
    ;;
orphans)
    trap '' TERM HUP INT
    setsid sleep "$mark.1" </dev/null >/dev/null 2>&1 &
    sleep "$mark.2" &
    (trap '' TERM; exec sleep "$mark.3") &
    echo '{"step": 1, "loss": 1.0}' > metrics.jsonl
    echo '{"step": 2, "loss": 0.9}' >> metrics.jsonl
    ;;
stubborn)
    trap '' TERM HUP INT
    while :; do sleep "$mark.4"; done
    ;;
links)
    ln -s "$3" metrics.jsonl
    ;;
*)
    echo "hostile.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
