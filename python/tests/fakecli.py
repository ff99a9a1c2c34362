"""The fake isched command the user-side tests run instead of the Go CLI."""

import os
import tempfile
import unittest
from unittest import mock


class FakeCLITest(unittest.TestCase):
    """A test whose isched command ($ISCHED_CLI) is the script FAKE (a class
    attribute: its source) in a temporary directory, self.tmp; os.environ
    is restored after each test."""

    FAKE = None

    def setUp(self):
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.fake = os.path.join(self.tmp.name, "isched")
        with open(self.fake, "w") as f:
            f.write(self.FAKE)
        os.chmod(self.fake, 0o755)
        os.environ["ISCHED_CLI"] = self.fake
