# Sourced by scripts/test.sh (and scripts/groups_test.go): a test run as a list of groups.
#
#   group NAME CMD...   runs CMD as group NAME, in a subshell under `set -e`, whatever the
#                       groups before it did, and records its exit code and seconds in
#                       $results (a directory the caller made; groups running in the
#                       background record there too)
#   summary             prints one line per recorded group, in the order they ended, and
#                       returns 1 if any failed; $start is the run's start ($SECONDS)
#
# The caller runs without `set -e`: a group's failure is recorded, never the end of the run.

# group NAME CMD...: runs CMD as group NAME under `set -e` in a subshell and records its
# exit code and duration in $results.
group() {
	local name=$1 t=$SECONDS rc
	shift
	echo "== $name"
	# Not `|| rc=$?`: bash ignores set -e inside a command whose status a || tests.
	(set -e; "$@")
	rc=$?
	printf '%s\t%s\t%s\n' "$rc" "$((SECONDS - t))" "$name" >"$results/$(date +%s%N)"
	[ "$rc" -eq 0 ] || echo "== $name: FAILED (exit $rc)" >&2
	return 0
}

summary() {
	local failed=0 rc secs name
	echo
	echo "== summary ($(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s in all)"
	for f in "$results"/*; do
		[ -f "$f" ] || continue
		IFS=$'\t' read -r rc secs name <"$f"
		if [ "$rc" -eq 0 ]; then
			printf '  pass  %5ss  %s\n' "$secs" "$name"
		else
			printf '  FAIL  %5ss  %s (exit %s)\n' "$secs" "$name" "$rc"
			failed=$((failed + 1))
		fi
	done
	rm -rf "$results"
	if [ "$failed" -ne 0 ]; then
		echo "FAILED: $failed group(s), listed above" >&2
		return 1
	fi
	echo "all groups passed"
}
