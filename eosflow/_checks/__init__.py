"""The checkers users run from outside an app: ``eosflow check`` and the test kit's
``check_exactly_once`` (``_checker``), ``check_state`` and ``check_counts``
(``_state_check``). Neither the command's ``run`` nor ``check`` path imports the test kit."""
