"""SHA-256 of every release record shipped in ``releases/``: what ``attnspec cite --verify``
trusts. Written by ``attnspec generate`` (the current version's line); a frozen release's
line is never rewritten. Do not edit."""

RECORD_SHA256 = {
    "1.0.0": "1850d804ce38a16d2b8da38ff54ecab80dd64b83d870c55202479f671ccdeaea",
    "1.1.0": "271a918bb02c513d4181c1ad7a9a80d368204681fe64ea112455f2ad0ed7daa0",
    "1.2.0": "bba3dcf11984dbdab706aed3262db31edf5851e411e96f54fd2693900acccda5",
    "1.3.0": "6ad2f9c14723d07c2ac7b080a2bfc08837a96619e4d0590009df854a4b2a6923",
    "1.4.0": "905504b6e60cbe7e3dd07e844057367f91d77b1f7acc1b014c3e0002d82671a1",
}
