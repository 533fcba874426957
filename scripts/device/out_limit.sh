# Sourced by the device scripts after they set OUT: the device returns at most 8 files from $OUT (device README,
# Limits), and silently keeps the rest there. revalidate.sh wrote 11 on 2026-12-06 and validation.json, the one
# record it was run for, stayed behind with verify.log. At exit, when $OUT holds more than 8 files, its *.log files
# go into one logs.tar.gz; if that is still too many, the files that will not come back are named on stderr.
out_limit() {
  local n
  n=$(find "$OUT" -type f | wc -l)
  [ "$n" -le 8 ] && return 0
  if compgen -G "$OUT/*.log" > /dev/null; then
    (cd "$OUT" && tar czf logs.tar.gz --remove-files ./*.log)
  fi
  n=$(find "$OUT" -type f | wc -l)
  [ "$n" -le 8 ] || echo "out_limit: $OUT holds $n files and the device returns 8: $(cd "$OUT" && find . -type f | sort | tr '\n' ' ')" >&2
}
trap out_limit EXIT
