"""MIG partition manager: catalogues, the partition state machine, layout policies, backends."""
