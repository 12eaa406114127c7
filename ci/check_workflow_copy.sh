#!/usr/bin/env bash
# ci/check_workflow_copy.sh [--update]
# GitHub runs workflows only from .github/workflows/; the source of truth is
# ci/github/workflows/. Fails (exit 1, with a diff) when a workflow there and its copy in
# .github/workflows/ differ or one is missing; --update copies them over instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=ci/github/workflows dst=.github/workflows status=0
[[ "${1:-}" == --update ]] && update=1 || update=0
for f in "$src"/*.yml "$dst"/*.yml; do
  [[ -e "$f" ]] || continue
  name=${f##*/}
  [[ "$f" == "$dst"/* && -e "$src/$name" ]] && continue  # compared from the src side
  if [[ ! -e "$src/$name" ]]; then
    echo "check_workflow_copy: $dst/$name has no source $src/$name" >&2; status=1
  elif ! cmp -s "$src/$name" "$dst/$name"; then
    if ((update)); then
      mkdir -p "$dst" && cp "$src/$name" "$dst/$name" && echo "updated $dst/$name"
    else
      echo "check_workflow_copy: $dst/$name is missing or differs from $src/$name (run ci/check_workflow_copy.sh --update)" >&2
      [[ -e "$dst/$name" ]] && { diff -u "$src/$name" "$dst/$name" >&2 || true; }
      status=1
    fi
  fi
done
((status == 0)) && ((update == 0)) && echo "check_workflow_copy: $dst matches $src"
exit $status
