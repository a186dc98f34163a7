# Sourced first by every script here: -h or --help prints the script's leading comment and exits before anything
# runs (no folder is deleted, no model loads).
for _arg in "$@"; do
  case "$_arg" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
done
unset _arg
