# Sourced by scripts/install and scripts/build-llama-server: a build's output reduced to progress.
# The output of a llama.cpp build (pip -v, ninja or make) → the compiler's [step/total] or [ N%] (one line every
# 10 s at most), pip's own milestones, and a heartbeat when nothing was printed for 30 s (configure,
# link).
build_progress() {
  local line last=$SECONDS shown=-100 started=$SECONDS
  while :; do
    if IFS= read -r -t 30 line; then
      if [[ $line =~ ^[[:space:]]*\[([0-9]+)/([0-9]+)\] ]]; then
        (( SECONDS - shown >= 10 )) || continue
        shown=$SECONDS
        printf '    compiled %s of %s steps (%ss)\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "$((SECONDS - started))"
      elif [[ $line =~ ^\[[[:space:]]*([0-9]+)%\] ]]; then  # make's [ 42%]
        (( SECONDS - shown >= 10 )) || continue
        shown=$SECONDS
        printf '    compiled %s%% (%ss)\n' "${BASH_REMATCH[1]}" "$((SECONDS - started))"
      elif [[ $line =~ ^[[:space:]]*(Building\ wheel|Created\ wheel|ERROR|error:|CMake\ Error) ]]; then
        printf '    %s\n' "${line#"${line%%[![:space:]]*}"}"
      else
        continue
      fi
      last=$SECONDS
    elif (( $? > 128 )); then
      printf '    still building (%ss)\n' "$((SECONDS - started))"
      last=$SECONDS
    else
      return 0  # end of the output
    fi
  done
}
