"""Download SB3's sdist (suite.SDIST) with pip and unpack its tests/ into sdist/tests/ here.

``make test`` runs this first (the folder is gitignored); the test files are SB3's own,
byte for byte, never copied into the repository. Run again, it does nothing.
"""

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from suite import SDIST

HERE = Path(__file__).resolve().parent
TARGET = HERE / "sdist"
STAMP = TARGET / ".unpacked"


def main() -> None:
    if STAMP.exists() and STAMP.read_text() == SDIST:
        return
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", SDIST, "-d", tmp]
        subprocess.run(command, check=True)
        (archive,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            top = tar.getnames()[0].split("/")[0]
            members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/tests/") and m.isfile()]
            for member in members:
                member.name = member.name[len(top) + 1 :]
            tar.extractall(TARGET, members=members, filter="data")
    STAMP.write_text(SDIST)


if __name__ == "__main__":
    main()
