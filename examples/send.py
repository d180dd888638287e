"""Send one email with the raw sender of the configured transport.

EMAILMW_CONFIG_FILE=email.yml python examples/send.py --name "my subject"
"""

from __future__ import annotations

import emailmw

from _common import parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], count=1, name="emailmw example")
    with emailmw.Context(args.config) as ctx:
        recipients = ctx.options.recipients
        for i in range(args.count):
            ctx.sender.send(
                emailmw.Email(
                    args.name,
                    f"hello from emailmw ({i})",
                    recipients.from_,
                    recipients.to,
                    recipients.cc,
                    recipients.bcc,
                )
            )
        ctx.flush(args.timeout)
        print(f"sent {args.count} email(s) to {', '.join(recipients.to)}")


if __name__ == "__main__":
    main()
